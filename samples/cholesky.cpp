// Solving a symmetric positive definite system A x = b with hcr::linalg: a tiled Cholesky
// factorisation (potrf) then the two triangular solves (potrs), on every device hcr finds.
//
//   build/bin/cholesky [n] [tile]        (default 2000 and 250)
#include <hcr/hcr.hpp>
#include <hcr/linalg.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 2000;
  const size_t tile = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 250;
  namespace la = hcr::linalg;

  // A random SPD matrix (symmetric, diagonally dominant) and a right-hand side; a0 and b0 stay
  // as they are, to check the answer. Memory hcr works on must outlive the runtime (which writes
  // data back as it ends): declared before it.
  std::mt19937 gen(42);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> a0(n * n), b0(n);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < i; ++j) a0[i * n + j] = a0[j * n + i] = u(gen);
    a0[i * n + i] = static_cast<double>(n) + 1;
    b0[i] = u(gen);
  }
  std::vector<double> a_mem = a0, b_mem = b0;

  hcr::Runtime rt;  // every plugin found; or hcr::Runtime rt(hcr::Config::load("devices.toml"));
  for (const hcr::Device& d : rt.devices())
    std::printf("device %u: %s (%s)\n", d.id, d.name.c_str(), d.backend.c_str());
  auto a = rt.wrap(a_mem.data(), n, n);  // hcr works on your memory, no copy
  auto b = rt.wrap(b_mem.data(), n, 1);  // a column: n x 1

  // Both return at once; potrs's tasks wait for the tiles of the factor they read. A becomes L
  // (its lower triangle), b becomes x.
  la::potrf(rt, la::Uplo::lower, a, tile);
  la::potrs(rt, la::Uplo::lower, a, b, tile).get();  // rethrows a failure (not positive definite)
  std::vector<double> x = b.to_vector();  // current on the host, wherever the tiles were solved

  // ||A x - b|| / (||A|| ||x|| + ||b||): around 1e-16 when all went well.
  double r2 = 0, a2 = 0, x2 = 0, b2 = 0;
  for (size_t i = 0; i < n; ++i) {
    double ax = 0;
    for (size_t j = 0; j < n; ++j) {
      ax += a0[i * n + j] * x[j];
      a2 += a0[i * n + j] * a0[i * n + j];
    }
    r2 += (ax - b0[i]) * (ax - b0[i]);
    x2 += x[i] * x[i];
    b2 += b0[i] * b0[i];
  }
  const double residual = std::sqrt(r2) / (std::sqrt(a2) * std::sqrt(x2) + std::sqrt(b2));
  std::printf("n = %zu, tiles of %zu: ||A x - b|| / (||A|| ||x|| + ||b||) = %.2e\n", n, tile,
              residual);
  return residual < 1e-12 ? 0 : 1;
}
