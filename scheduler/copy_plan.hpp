// Moved to peft/copy_plan.hpp. This path stays for tests/scheduler/peft_test.cpp, which
// includes it: remove it once the test includes peft/copy_plan.hpp.
#pragma once

#include "peft/copy_plan.hpp"
