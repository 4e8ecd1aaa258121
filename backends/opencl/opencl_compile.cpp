// hcr-opencl-compile: builds an OpenCL C file for one device and writes its program binary
// (CL_PROGRAM_BINARIES), the file a [[backend.binary]] table of the OpenCL backend names.
//
//   hcr-opencl-compile [--platform TEXT] [--device TEXT] [--options "-D N=4"] -o vadd.bin vadd.cl
//   hcr-opencl-compile --list
//
// The device is the first of any type whose platform and device names contain the given texts
// (case-insensitive). Exit status: 0 built, 1 build failed (the log is printed), 2 bad usage,
// 3 no matching device or another OpenCL error.
#include "cl_api.hpp"
#include "cl_error.hpp"
#include "cl_handle.hpp"
#include "cl_info.hpp"
#include "safe_file.hpp"

#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace hcr::opencl;

// OpenCL C sources are kilobytes; this bounds what a wrong argument (/dev/zero) costs.
constexpr size_t kMaxSourceBytes = size_t{64} << 20;

int usage() {
  std::cerr << "usage: hcr-opencl-compile [--platform TEXT] [--device TEXT] [--options OPTIONS] "
               "-o OUTPUT SOURCE.cl\n       hcr-opencl-compile --list\n";
  return 2;
}

struct Found {
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  std::string platform_name, device_name;
};

std::vector<Found> all_devices() {
  std::vector<Found> out;
  for (cl_platform_id p : list_platforms())
    for (cl_device_id d : list_devices(p, CL_DEVICE_TYPE_ALL))
      out.push_back({p, d, platform_string(p, CL_PLATFORM_NAME), device_string(d, CL_DEVICE_NAME)});
  return out;
}

int run(int argc, char** argv) {
  std::string platform, device, options, output, source;
  bool list = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string& into) {
      if (i + 1 >= argc) return false;
      into = argv[++i];
      return true;
    };
    if (a == "--list") list = true;
    else if (a == "--platform") {
      if (!value(platform)) return usage();
    } else if (a == "--device") {
      if (!value(device)) return usage();
    } else if (a == "--options") {
      if (!value(options)) return usage();
    } else if (a == "-o") {
      if (!value(output)) return usage();
    } else if (!a.empty() && a[0] == '-') return usage();
    else if (source.empty()) source = a;
    else return usage();
  }
  const std::vector<Found> devices = all_devices();
  if (list) {
    for (const Found& f : devices) std::cout << f.platform_name << ": " << f.device_name << "\n";
    return 0;
  }
  if (output.empty() || source.empty()) return usage();
  const Found* chosen = nullptr;
  for (const Found& f : devices)
    if (contains_icase(f.platform_name, platform) && contains_icase(f.device_name, device)) {
      chosen = &f;
      break;
    }
  if (chosen == nullptr) {
    std::cerr << "hcr-opencl-compile: no OpenCL device matches (platform '" << platform
              << "', device '" << device << "'); --list shows them\n";
    return 3;
  }
  std::string text;
  try {
    // A regular file (a FIFO or a device is refused unopened) of a sane size.
    text = hcr::files::read_file(source, kMaxSourceBytes);
  } catch (const hcr::files::FileError& e) {
    std::cerr << "hcr-opencl-compile: " << e.what() << "\n";
    return 2;
  }

  cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                   reinterpret_cast<cl_context_properties>(chosen->platform), 0};
  Context ctx(cl_create("clCreateContext", [&](cl_int* e) {
    return clCreateContext(props, 1, &chosen->device, nullptr, nullptr, e);
  }));
  const char* ptr = text.c_str();
  const size_t len = text.size();
  Program prog(cl_create("clCreateProgramWithSource", [&](cl_int* e) {
    return clCreateProgramWithSource(ctx.get(), 1, &ptr, &len, e);
  }));
  cl_int err = clBuildProgram(prog.get(), 1, &chosen->device, options.c_str(), nullptr, nullptr);
  if (err != CL_SUCCESS) {
    std::cerr << "hcr-opencl-compile: building '" << source << "' for '" << chosen->device_name
              << "' failed: " << cl_error_text("clBuildProgram", err) << "\n"
              << build_log(prog.get(), chosen->device) << "\n";
    return 1;
  }
  const std::vector<unsigned char> bin = program_binary(prog.get());
  try {
    // Through a unique temporary beside the target, renamed: a reader never sees half a binary,
    // and a link planted at the temporary's name is never followed.
    hcr::files::write_file(output,
                           std::string_view(reinterpret_cast<const char*>(bin.data()), bin.size()));
  } catch (const hcr::files::FileError& e) {
    std::cerr << "hcr-opencl-compile: " << e.what() << "\n";
    return 3;
  }
  std::cout << "built '" << source << "' for '" << chosen->device_name << "' ("
            << chosen->platform_name << "): " << bin.size() << " bytes -> " << output << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "hcr-opencl-compile: " << e.what() << "\n";
    return 3;
  }
}
