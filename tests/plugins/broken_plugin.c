/* Deliberately broken plugins for the loader tests. One source, one library per defect, chosen
 * with -DDEFECT=<n>. Each must be skipped with a diagnostic that names it; none may crash the
 * runtime. Pure C, as an out-of-tree vendor might write. */
#include <hcr/plugin.h>

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NO_ENTRY 1     /* exports something else, not hcr_plugin_get_api */
#define WRONG_MAJOR 2  /* speaks ABI major + 1 */
#define SHORT_TABLE 3  /* struct_size smaller than ABI 1.0's table */
#define NULL_ENTRY 4   /* `launch` is NULL */
#define INIT_FAILS 5   /* plugin_create returns an error */
#define GARBAGE_SIZE 6 /* struct_size is nonsense (huge) */
#define RETURNS_NULL 7 /* hcr_plugin_get_api returns NULL */
/* Defects no process survives, for `hcr devices`' probes (tests/plugins/crashing, never in a
 * directory the other tests load): */
#define CRASH_CREATE 8 /* plugin_create dies of SIGSEGV */
#define HANG_COUNT 9   /* device_count never returns */
#define CRASH_LOAD 10  /* a static initialiser dies of SIGSEGV while the library loads */

#ifndef PLUGIN_NAME
#define PLUGIN_NAME "broken"
#endif

struct hcr_error {
  hcr_error_code_t code;
  const char* message;
};

static hcr_error_code_t err_code(const hcr_error_t* e) { return e->code; }
static const char* err_message(const hcr_error_t* e) { return e->message; }
static void err_destroy(hcr_error_t* e) { free(e); }
static hcr_error_t* make_error(const char* message) {
  hcr_error_t* e = (hcr_error_t*)malloc(sizeof *e);
  e->code = HCR_ERROR_BACKEND;
  e->message = message;
  return e;
}
static hcr_error_t* create(hcr_plugin_create_args_t* a) {
#if DEFECT == INIT_FAILS
  (void)a;
  return make_error("broken plugin: init refuses to start (no hardware)");
#elif DEFECT == CRASH_CREATE
  (void)a;
  raise(SIGSEGV);
  return make_error("unreachable");
#else
  a->plugin = (hcr_plugin_t*)1;
  return NULL;
#endif
}
static void destroy(hcr_plugin_t* p) { (void)p; }
static hcr_error_t* count(hcr_plugin_t* p, size_t* n) {
  (void)p;
#if DEFECT == HANG_COUNT
  for (;;) pause();
#endif
  *n = 0;
  return NULL;
}

#if DEFECT == CRASH_LOAD
__attribute__((constructor)) static void crash_while_loading(void) { raise(SIGSEGV); }
#endif
static hcr_error_t* info(hcr_plugin_t* p, size_t d, hcr_device_info_t* i) {
  (void)p, (void)d, (void)i;
  return make_error("no devices");
}
static hcr_error_t* kget(hcr_plugin_t* p, hcr_kernel_get_args_t* a) {
  (void)p, (void)a;
  return make_error("no kernels");
}
static void krel(hcr_plugin_t* p, hcr_kernel_t* k) { (void)p, (void)k; }
static hcr_error_t* launch(hcr_plugin_t* p, const hcr_launch_args_t* a) {
  (void)p, (void)a;
  return make_error("no launches");
}
static hcr_error_t* sync_(hcr_plugin_t* p, size_t d) {
  (void)p, (void)d;
  return NULL;
}

static hcr_plugin_api_t table;

static const hcr_plugin_api_t* get_api(void) {
  memset(&table, 0, sizeof table);
  table.struct_size = HCR_PLUGIN_API_STRUCT_SIZE;
  table.abi_major = HCR_ABI_MAJOR;
  table.abi_minor = HCR_ABI_MINOR;
  table.name = PLUGIN_NAME;
  table.version = "0";
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
#if DEFECT == WRONG_MAJOR
  table.abi_major = HCR_ABI_MAJOR + 1;
#elif DEFECT == SHORT_TABLE
  table.struct_size = offsetof(hcr_plugin_api_t, launch);
#elif DEFECT == NULL_ENTRY
  table.launch = NULL;
#elif DEFECT == GARBAGE_SIZE
  table.struct_size = (size_t)-16;
#endif
  return &table;
}

#if DEFECT == NO_ENTRY
HCR_PLUGIN_EXPORT const hcr_plugin_api_t* hcr_plugin_get_api_v2(void) { return get_api(); }
#elif DEFECT == RETURNS_NULL
HCR_PLUGIN_EXPORT const hcr_plugin_api_t* hcr_plugin_get_api(void) { return NULL; }
#else
HCR_PLUGIN_EXPORT const hcr_plugin_api_t* hcr_plugin_get_api(void) { return get_api(); }
#endif
