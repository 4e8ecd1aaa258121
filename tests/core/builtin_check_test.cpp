// Tasks of the built-in kernels are checked at Runtime::submit (core/src/builtin_check.cpp): a
// wrong buffer count, element type, shape, parameter block, enumeration value, access mode or an
// output aliasing an input throws there, naming it, before any device sees the task.
#include "../test_support.hpp"

#include <functional>

namespace hcr {
namespace {

struct Refusal {
  const char* why;  // for the failure message
  std::function<Task(Runtime&)> task;
  std::string message;  // must appear in the error
};

TEST(BuiltinCheck, RefusesAtSubmitNamingWhatDoesNotFit) {
  Runtime rt(test::cpu_config(1));
  auto f22 = rt.buffer<float>(2, 2), g22 = rt.buffer<float>(2, 2), h22 = rt.buffer<float>(2, 2);
  auto f23 = rt.buffer<float>(2, 3), f32_ = rt.buffer<float>(3, 2), f34 = rt.buffer<float>(3, 4);
  auto d22 = rt.buffer<double>(2, 2), d23 = rt.buffer<double>(2, 3), d33 = rt.buffer<double>(3, 3);
  auto d32 = rt.buffer<double>(3, 2), e22 = rt.buffer<double>(2, 2);
  const hcr_gemm_params_t g0{HCR_GEMM_PARAMS_STRUCT_SIZE, 1, 0};
  const hcr_gemm_params_t g1{HCR_GEMM_PARAMS_STRUCT_SIZE, 1, 0.5};
  const hcr_syrk_params_t s0{HCR_SYRK_PARAMS_STRUCT_SIZE, 1, 0, HCR_LOWER, HCR_NO_TRANS};
  const hcr_trsm_params_t tl{HCR_TRSM_PARAMS_STRUCT_SIZE, 1, HCR_LEFT, HCR_LOWER, 0, 0};
  const hcr_trsm_params_t tr{HCR_TRSM_PARAMS_STRUCT_SIZE, 1, HCR_RIGHT, HCR_UPPER, 0, 0};
  const hcr_potrf_params_t pl{HCR_POTRF_PARAMS_STRUCT_SIZE, HCR_LOWER};
  auto k = [&rt](const char* name) { return Task(rt.kernel(name)); };
  auto gemm_with = [](hcr_gemm_params_t p, int32_t ta, int32_t tb) {
    p.trans_a = ta;
    p.trans_b = tb;
    return p;
  };
  struct {
    size_t struct_size;
    double alpha;
  } short_block{16, 1.0};
  const std::vector<Refusal> cases = {
      // gemm
      {"count", [&](Runtime&) { return std::move(k("gemm_f32").read(f22).write(g22)); },
       "Runtime::submit: gemm_f32: takes 3 buffers (A, B, C), got 2"},
      {"element type",
       [&](Runtime&) { return std::move(k("gemm_f32").read(f22).read(d22).write(g22)); },
       "gemm_f32: B (argument 1, a 2x2 f64 buffer) is not an f32 matrix"},
      {"shapes",
       [&](Runtime&) { return std::move(k("gemm_f32").read(f23).read(f34).write(g22).param(g0)); },
       "gemm_f32: shapes do not match: A is 2x3, B is 3x4, C is 2x2 (trans_a 0, trans_b 0"},
      {"shapes with a transpose",  // op(A) = A^T is 2x3: C must be 2x4
       [&](Runtime&) {
         return std::move(k("gemm_f32").read(f32_).read(f34).write(f23).param(gemm_with(g0, 1, 0)));
       },
       "A is 3x2, B is 3x4, C is 2x3 (trans_a 1, trans_b 0"},
      {"transposes",
       [&](Runtime&) {
         return std::move(k("gemm_f32").read(f22).read(g22).write(h22).param(gemm_with(g0, 0, 2)));
       },
       "gemm_f32: trans_b 2 is neither HCR_NO_TRANS (0) nor HCR_TRANS (1)"},
      {"two parameters",
       [&](Runtime&) {
         return std::move(k("gemm_f32").read(f22).read(g22).write(h22).param(1.0).param(0.0));
       },
       "gemm_f32: takes one parameter, an hcr_gemm_params_t; got 2"},
      {"a short block",
       [&](Runtime&) {
         return std::move(k("gemm_f32").read(f22).read(g22).write(h22).param(short_block));
       },
       "gemm_f32: the parameter is 16 bytes with struct_size 16, not an hcr_gemm_params_t "
       "(struct_size at least 24"},
      {"C written only while beta reads it",
       [&](Runtime&) { return std::move(k("gemm_f32").read(f22).read(g22).write(h22).param(g1)); },
       "gemm_f32: C (argument 2, a 2x2 f32 buffer) is passed write, but the kernel reads it "
       "(beta is not 0) and writes it: pass it read_write"},
      {"C read only",
       [&](Runtime&) { return std::move(k("gemm_f32").read(f22).read(g22).read(h22).param(g0)); },
       "C (argument 2, a 2x2 f32 buffer) is passed read, but the kernel writes it"},
      {"an input written only",
       [&](Runtime&) { return std::move(k("gemm_f32").write(f22).read(g22).write(h22).param(g0)); },
       "A (argument 0, a 2x2 f32 buffer) is passed write, but the kernel reads it: pass it read"},
      {"C aliasing A",
       [&](Runtime&) {
         return std::move(k("gemm_f32").read(f22).read(g22).read_write(f22).param(g1));
       },
       "gemm_f32: C and A are the same 2x2 f32 buffer (arguments 0 and 2): the kernel's output "
       "must not alias its inputs"},
      // syrk
      {"syrk's uplo",
       [&](Runtime&) {
         return std::move(k("syrk_f64")
                              .read(d22)
                              .read_write(e22)
                              .param(hcr_syrk_params_t{HCR_SYRK_PARAMS_STRUCT_SIZE, 1, 0, 5, 0}));
       },
       "syrk_f64: uplo 5 is neither HCR_LOWER (0) nor HCR_UPPER (1)"},
      {"syrk's C not square",
       [&](Runtime&) { return std::move(k("syrk_f64").read(d22).read_write(d23).param(s0)); },
       "syrk_f64: C (argument 1, a 2x3 f64 buffer) is not square"},
      {"syrk's A",
       [&](Runtime&) { return std::move(k("syrk_f64").read(d32).read_write(e22).param(s0)); },
       "syrk_f64: shapes do not match: A is 3x2, C is 2x2 (trans 0: need op(A) n x k, C n x n)"},
      {"syrk's C written only",  // its other triangle would be lost where C is copied
       [&](Runtime&) { return std::move(k("syrk_f64").read(d23).write(e22).param(s0)); },
       "syrk_f64: C (argument 1, a 2x2 f64 buffer) is passed write, but the kernel writes one "
       "triangle and keeps the other: pass it read_write"},
      {"syrk without parameters",
       [&](Runtime&) { return std::move(k("syrk_f64").read(d23).read_write(e22)); },
       "syrk_f64: takes one parameter, an hcr_syrk_params_t; got 0"},
      // trsm
      {"trsm's side",
       [&](Runtime&) {
         return std::move(
             k("trsm_f64")
                 .read(d22)
                 .read_write(d23)
                 .param(hcr_trsm_params_t{HCR_TRSM_PARAMS_STRUCT_SIZE, 1, 3, 0, 0, 0}));
       },
       "trsm_f64: side 3 is neither HCR_LEFT (0) nor HCR_RIGHT (1)"},
      {"trsm's diag",
       [&](Runtime&) {
         return std::move(
             k("trsm_f64")
                 .read(d22)
                 .read_write(d23)
                 .param(hcr_trsm_params_t{HCR_TRSM_PARAMS_STRUCT_SIZE, 1, 0, 0, 0, -1}));
       },
       "trsm_f64: diag -1 is neither HCR_NON_UNIT (0) nor HCR_UNIT (1)"},
      {"trsm on the left",
       [&](Runtime&) { return std::move(k("trsm_f64").read(d33).read_write(d23).param(tl)); },
       "trsm_f64: shapes do not match: A is 3x3, B is 2x3 (side left: need A m x m, B m x n)"},
      {"trsm on the right",
       [&](Runtime&) { return std::move(k("trsm_f64").read(d22).read_write(d23).param(tr)); },
       "trsm_f64: shapes do not match: A is 2x2, B is 2x3 (side right: need A n x n, B m x n)"},
      {"trsm's A not square",
       [&](Runtime&) { return std::move(k("trsm_f64").read(d23).read_write(d22).param(tl)); },
       "trsm_f64: A (argument 0, a 2x3 f64 buffer) is not square"},
      {"trsm's B read only",
       [&](Runtime&) { return std::move(k("trsm_f64").read(d22).read(d23).param(tl)); },
       "trsm_f64: B (argument 1, a 2x3 f64 buffer) is passed read, but the kernel updates it in "
       "place: pass it read_write"},
      // potrf and getrf_nopiv
      {"potrf's uplo",
       [&](Runtime&) {
         return std::move(k("potrf_f32")
                              .read_write(f22)
                              .param(hcr_potrf_params_t{HCR_POTRF_PARAMS_STRUCT_SIZE, 2}));
       },
       "potrf_f32: uplo 2 is neither HCR_LOWER (0) nor HCR_UPPER (1)"},
      {"potrf's A not square",
       [&](Runtime&) { return std::move(k("potrf_f32").read_write(f23).param(pl)); },
       "potrf_f32: A (argument 0, a 2x3 f32 buffer) is not square"},
      {"potrf's A written only",
       [&](Runtime&) { return std::move(k("potrf_f32").write(f22).param(pl)); },
       "potrf_f32: A (argument 0, a 2x2 f32 buffer) is passed write, but the kernel updates it "
       "in place: pass it read_write"},
      {"getrf_nopiv with a parameter",
       [&](Runtime&) { return std::move(k("getrf_nopiv_f32").read_write(f22).param(pl)); },
       "getrf_nopiv_f32: takes no parameters, got 1"},
      {"getrf_nopiv of two buffers",
       [&](Runtime&) { return std::move(k("getrf_nopiv_f32").read_write(f22).read(g22)); },
       "getrf_nopiv_f32: takes 1 buffer (A), got 2"},
  };
  for (const Refusal& c : cases) {
    Task t = c.task(rt);
    Error e = test::expect_error([&] { rt.submit(t); });  // at submit: no get() needed
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << c.why;
    EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos)
        << c.why << ": wanted '" << c.message << "' in '" << e.what() << "'";
  }
  // Nothing ran: no buffer holds the output of a failed task.
  for (const Buffer<float>& b : {f22, g22, h22, f23, f34}) EXPECT_NO_THROW(b.to_vector());
  EXPECT_NO_THROW(e22.to_vector());
}

TEST(BuiltinCheck, WellFormedTasksPass) {
  Runtime rt(test::cpu_config(1));
  auto a = rt.buffer<double>(3, 2), b = rt.buffer<double>(4, 3), c = rt.buffer<double>(2, 4);
  // No parameter means alpha 1, beta 0; the same buffer as A and B is fine (both are read).
  auto s = rt.buffer<double>(3, 3);
  rt.submit(Task(rt.kernel("gemm_f64")).read(s).read(s).read_write(rt.buffer<double>(3, 3))).get();
  const hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1, 0, HCR_TRANS, HCR_TRANS};
  rt.submit(Task(rt.kernel("gemm_f64")).read(a).read(b).write(c).param(p)).get();
}

// Only the built-in names are checked: a user kernel of another name takes whatever it likes.
TEST(BuiltinCheck, UserKernelsAreNotChecked) {
  Runtime rt(test::cpu_config(1));
  int runs = 0;
  for (const char* name : {"gemm", "my_gemm_f32", "potrf_f128", "trsm_f32x"}) {
    Kernel k = rt.kernel(name).cpu([&runs](TaskContext&) { ++runs; });
    rt.submit(Task(k).write(rt.buffer<float>(2, 3)).param(1.5)).get();
  }
  EXPECT_EQ(runs, 4);
}

}  // namespace
}  // namespace hcr
