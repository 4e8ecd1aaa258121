/* A plugin built as ABI 1.0 was: its table ends at `estimate` (no device_energy), abi_minor 0, and
 * its completions carry only device_seconds. One host-memory device that runs host functions
 * inline, each reported to have taken 2 ms. A newer host must load it and use it as it is. */
#include <hcr/plugin.h>

#include <stdlib.h>
#include <string.h>

struct hcr_error {
  hcr_error_code_t code;
  char message[128];
};
struct hcr_kernel {
  hcr_kernel_fn fn;
  void* user_data;
};

static hcr_error_code_t err_code(const hcr_error_t* e) { return e->code; }
static const char* err_message(const hcr_error_t* e) { return e->message; }
static void err_destroy(hcr_error_t* e) { free(e); }
static hcr_error_t* make_error(hcr_error_code_t code, const char* message) {
  hcr_error_t* e = (hcr_error_t*)calloc(1, sizeof *e);
  e->code = code;
  strncpy(e->message, message, sizeof e->message - 1);
  return e;
}

static hcr_error_t* create(hcr_plugin_create_args_t* a) {
  a->plugin = (hcr_plugin_t*)1;
  return NULL;
}
static void destroy(hcr_plugin_t* p) { (void)p; }
static hcr_error_t* count(hcr_plugin_t* p, size_t* n) {
  (void)p;
  *n = 1;
  return NULL;
}
static hcr_error_t* info(hcr_plugin_t* p, size_t d, hcr_device_info_t* i) {
  (void)p, (void)d;
  i->name = "abi 1.0 device";
  i->arch = "abi10";
  i->kind = HCR_DEVICE_CPU;
  i->flags = HCR_DEVICE_HOST_MEMORY;
  i->memory_bytes = 1u << 30;
  i->compute_units = 1;
  i->concurrency = 1;
  return NULL;
}
static hcr_error_t* kget(hcr_plugin_t* p, hcr_kernel_get_args_t* a) {
  (void)p;
  if (a->desc->kind != HCR_IMPL_HOST_FUNCTION || a->desc->fn == NULL)
    return make_error(HCR_ERROR_NOT_FOUND, "abi10: host functions only");
  hcr_kernel_t* k = (hcr_kernel_t*)malloc(sizeof *k);
  k->fn = a->desc->fn;
  k->user_data = a->desc->user_data;
  a->kernel = k;
  return NULL;
}
static void krel(hcr_plugin_t* p, hcr_kernel_t* k) {
  (void)p;
  free(k);
}
/* The completion info of ABI 1.0: device_seconds and nothing after it. */
struct info_1_0 {
  size_t struct_size;
  double device_seconds;
};
static hcr_error_t* launch(hcr_plugin_t* p, const hcr_launch_args_t* a) {
  (void)p;
  hcr_exec_context_t ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.struct_size = HCR_EXEC_CONTEXT_STRUCT_SIZE;
  ctx.args = a->args;
  ctx.num_args = a->num_args;
  ctx.params = a->params;
  ctx.params_size = a->params_size;
  ctx.host_token = a->host_token;
  ctx.param_offsets = a->param_offsets;
  ctx.num_params = a->num_params;
  char message[256] = {0};
  hcr_error_t* error = NULL;
  if (a->kernel->fn(a->kernel->user_data, &ctx, message, sizeof message) != 0)
    error = make_error(HCR_ERROR_BACKEND, message);
  struct info_1_0 done_info = {sizeof done_info, 0.002};
  a->done(a->done_user_data, error, (const hcr_completion_info_t*)&done_info);
  return NULL;
}
static hcr_error_t* sync_(hcr_plugin_t* p, size_t d) {
  (void)p, (void)d;
  return NULL;
}

static hcr_plugin_api_t table;

HCR_PLUGIN_EXPORT const hcr_plugin_api_t* hcr_plugin_get_api(void) {
  memset(&table, 0, sizeof table);
  table.struct_size = HCR_PLUGIN_API_STRUCT_SIZE_1_0;
  table.abi_major = 1;
  table.abi_minor = 0;
  table.name = "abi10";
  table.version = "1.0";
  table.error_code = err_code;
  table.error_message = err_message;
  table.error_destroy = err_destroy;
  table.plugin_create = create;
  table.plugin_destroy = destroy;
  table.device_count = count;
  table.device_info = info;
  table.kernel_get = kget;
  table.kernel_release = krel;
  table.launch = launch;
  table.synchronize = sync_;
  /* A host reading past the table's size would find this, not a NULL. */
  table.device_energy = (hcr_error_t * (*)(hcr_plugin_t*, size_t, hcr_energy_reading_t*))1;
  return &table;
}
