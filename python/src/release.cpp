// References dropped where the interpreter lock is not held: runtime threads never wait for the
// lock (a thread holding it may be waiting for them), so they queue the reference instead, and the
// interpreter drops it on its main thread (Py_AddPendingCall) or at the module's next call.
#include "binding.hpp"

#include <atomic>

namespace hcrpy {

namespace {

std::mutex g_mutex;
std::vector<PyObject*> g_pending;
bool g_scheduled = false;  // a pending call is queued (under g_mutex)
std::atomic<bool> g_finalizing{false};

int pending_call(void*) {
  {
    std::lock_guard lock(g_mutex);
    g_scheduled = false;
  }
  drain_releases();
  return 0;
}

}  // namespace

bool python_finalizing() noexcept { return g_finalizing.load(std::memory_order_acquire); }
void set_python_finalizing() noexcept { g_finalizing.store(true, std::memory_order_release); }

void defer_decref(PyObject* o) noexcept {
  if (o == nullptr) return;
  if (python_finalizing() || !Py_IsInitialized()) return;  // the interpreter is going: leak
  std::lock_guard lock(g_mutex);
  try {
    g_pending.push_back(o);
  } catch (...) {
    return;  // out of memory: leak rather than touch the object without the lock
  }
  if (!g_scheduled) g_scheduled = Py_AddPendingCall(pending_call, nullptr) == 0;
}

void drain_releases() noexcept {
  std::vector<PyObject*> batch;
  {
    std::lock_guard lock(g_mutex);
    if (g_pending.empty()) return;
    batch.swap(g_pending);
  }
  for (PyObject* o : batch) Py_DECREF(o);  // may run finalizers that queue more: next drain
}

void PyRef::reset() noexcept {
  PyObject* p = std::exchange(p_, nullptr);
  if (p == nullptr) return;
  if (Py_IsInitialized() && PyGILState_Check()) Py_DECREF(p);
  else defer_decref(p);
}

}  // namespace hcrpy
