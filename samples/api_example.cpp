// The README's API example: a user CPU kernel, dependencies by access order, and a tiled gemm.
#include <hcr/hcr.hpp>

#include <cstdio>

int main() {
  hcr::Runtime rt;  // every plugin found; or hcr::Runtime rt(hcr::Config::load("devices.toml"));
  for (const hcr::Device& d : rt.devices())
    std::printf("device %u: %s (%s)\n", d.id, d.name.c_str(), d.backend.c_str());

  const size_t n = 512;
  auto a = rt.buffer<float>(n, n), b = rt.buffer<float>(n, n), c = rt.buffer<float>(n, n);

  // A kernel with a CPU implementation; scalar parameters travel with the task.
  hcr::Kernel fill = rt.kernel("fill").cpu([](hcr::TaskContext& ctx) {
    auto m = ctx.arg<float>(0);
    float v = ctx.param<float>(0);
    for (size_t r = 0; r < m.rows; ++r)
      for (size_t col = 0; col < m.cols; ++col) m(r, col) = v;
  });
  rt.submit(hcr::Task(fill).write(a).param(1.0f));
  rt.submit(hcr::Task(fill).write(b).param(2.0f));

  // C = A * B in 128 x 128 tiles; it waits for the fills because it reads A and B.
  hcr::blas::gemm(rt, a, b, c, 128).get();

  std::vector<float> out = c.to_vector();
  std::printf("C(0,0) = %.1f (expect %.1f)\n", out[0], 2.0 * n);
  return out[0] == 2.0f * n ? 0 : 1;
}
