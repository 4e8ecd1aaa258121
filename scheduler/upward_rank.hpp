// Moved to peft/upward_rank.hpp. This path stays for tests/scheduler/peft_test.cpp, which
// includes it: remove it once the test includes peft/upward_rank.hpp.
#pragma once

#include "peft/upward_rank.hpp"
