// Runs the sample plugin's kernel through hcr: point HCR_PLUGIN_PATH at the plugin's directory.
#include <hcr/hcr.hpp>

#include <cstdio>

int main() {
  hcr::Runtime rt;
  int sample = -1;
  for (const hcr::Device& d : rt.devices())
    if (d.backend == "sample") sample = static_cast<int>(d.id);
  if (sample < 0) {
    std::fprintf(stderr, "no sample device: is the plugin in HCR_PLUGIN_PATH?\n");
    return 1;
  }
  auto x = rt.vector<float>(8);
  {
    auto v = x.acquire(hcr::Access::write);
    for (size_t i = 0; i < 8; ++i) v(0, i) = static_cast<float>(i);
  }
  rt.submit(hcr::Task(rt.kernel("sample_scale")).read_write(x).param(3.0f).on(sample)).get();
  auto out = x.to_vector();
  for (size_t i = 0; i < 8; ++i)
    if (out[i] != 3.0f * i) {
      std::fprintf(stderr, "x[%zu] = %f, expected %f\n", i, out[i], 3.0 * i);
      return 1;
    }
  std::printf("sample_scale ran on device %d: OK\n", sample);
  return 0;
}
