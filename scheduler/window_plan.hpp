// Moved to peft/window_plan.hpp. This path stays for tests/scheduler/peft_test.cpp, which
// includes it: remove it once the test includes peft/window_plan.hpp.
#pragma once

#include "peft/window_plan.hpp"
