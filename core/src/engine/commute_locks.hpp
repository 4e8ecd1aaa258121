// Commute locks: the tasks of a commute run (Access::commute) on a buffer wait for no one in the
// run, so the run holds them apart here: one task at a time holds the buffer, from its placement
// (the data it then fetches is no other's to write meanwhile) to its end. A task with several
// commute buffers holds all of them or none (no deadlock); one that cannot get a buffer lets go
// of the others and waits for that one on its list, holding nothing, neither a device's slot nor a
// thread. Whoever lets go of a buffer hands it to the first task waiting for it, which is then
// placed again (and tries for the rest).
//
// Thread safety: any thread; each buffer's holder and list are under the buffer's lock.
#pragma once

#include "../task_node.hpp"

#include <boost/container/small_vector.hpp>

namespace hcr::detail {

/// Tasks a buffer was handed to: the caller places them.
using CommuteResumed = boost::container::small_vector<TaskNode*, 2>;

/// Takes every buffer `t` commutes on, or none. True when it holds them all (t->commute_held);
/// false when it waits on the list of one it could not get, to be handed it later (through
/// another call's `resumed`). Tasks handed buffers it let go of go to `resumed`.
bool commute_take(TaskNode* t, CommuteResumed& resumed) noexcept;

/// `t` ends, or is parked: the buffers it holds go to the first task waiting for each (appended
/// to `resumed`), and it leaves any list it is on.
void commute_release(TaskNode* t, CommuteResumed& resumed) noexcept;

}  // namespace hcr::detail
