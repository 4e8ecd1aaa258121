// Checks a file is a loadable shared library for this machine before dlopen sees it: glibc's
// loader trusts the headers and faults (SIGBUS) mapping a truncated file.
#pragma once

#include <filesystem>
#include <string>

namespace hcr::detail {

/// Empty when `file` looks loadable; otherwise why not ("truncated: ...", "built for aarch64").
std::string elf_problem(const std::filesystem::path& file);

}  // namespace hcr::detail
