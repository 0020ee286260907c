// The fiber executor of the host execution layer (see executor.h).
#include "tests/gpu_host/executor.h"

#include <boost/context/fiber.hpp>
#include <boost/context/stack_context.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "tests/gpu_host/runtime_internal.h"
#include "tests/gpu_host/shared_memory.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TS_HOST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TS_HOST_ASAN 1
#endif
#ifdef TS_HOST_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace tinyserve::gpu_host {
namespace {

namespace ctx = boost::context;

#ifdef TS_HOST_ASAN
constexpr size_t kStackBytes = size_t{1} << 20;
#else
constexpr size_t kStackBytes = size_t{256} << 10;
#endif

enum class State { kReady, kBarrier, kWarp, kDone };

struct Thread {
  uint3 idx{};
  int linear = 0;
  State state = State::kReady;
  WarpKind kind = WarpKind::kSync;
  const char* what = "";
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int arg = 0, width = 32;
  ctx::fiber fiber;
  ctx::fiber* sink = nullptr;  // the scheduler, while this thread runs
  void* stack = nullptr;
#ifdef TS_HOST_ASAN
  void* fake_stack = nullptr;
#endif
};

// Stacks are kept for the life of the OS thread: a block of 1024 threads takes 1024 of them.
struct StackPool {
  std::vector<void*> free;
  ~StackPool() {
    for (void* p : free) std::free(p);
  }
  void* Take() {
    if (free.empty()) return std::aligned_alloc(64, kStackBytes);
    void* p = free.back();
    free.pop_back();
    return p;
  }
};
thread_local StackPool t_stacks;

// Hands one given stack to boost (which puts its control record at the top); returns nothing.
struct GivenStack {
  void* base;
  ctx::stack_context allocate() {
    ctx::stack_context sc;
    sc.size = kStackBytes;
    sc.sp = static_cast<char*>(base) + kStackBytes;
    return sc;
  }
  void deallocate(ctx::stack_context&) {}
};

struct Block {
  const char* kernel = "";
  std::vector<Thread>* threads = nullptr;
  Thread* current = nullptr;
  bool faulted = false;
#ifdef TS_HOST_ASAN
  const void* main_bottom = nullptr;
  size_t main_size = 0;
#endif
};

thread_local Block* t_block = nullptr;
// The barrier interval of the running block: a new one at each block start and barrier release
// (shared-memory shadows from older intervals are clean).
thread_local uint64_t t_interval = 0;
thread_local uint64_t t_block_serial = 0;  // a new one for each block run
// The running launch's dynamic shared memory: its bytes and one shadow per byte (a T view uses
// the first bytes / sizeof(T)). Grown, never shrunk; stale shadows are from older blocks.
thread_local std::vector<unsigned char> t_dynamic;
thread_local std::vector<SharedShadow> t_dynamic_shadow;
thread_local size_t t_dynamic_bytes = 0;
thread_local uint3 t_block_idx{};
thread_local dim3 t_block_dim, t_grid_dim;

std::string Str(const uint3& v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

std::string Hex(unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// Records a fault of the running block (the first one of a block is enough).
void BlockFault(const Thread& t, const std::string& what) {
  Block& b = *t_block;
  if (b.faulted) return;
  b.faulted = true;
  RecordFault("kernel " + std::string(b.kernel) + ", block " + Str(t_block_idx) + ", thread " +
              Str(t.idx) + ": " + what);
}

// Back to the scheduler from the running thread's fiber.
void Yield() {
  Block& b = *t_block;
  Thread* t = b.current;
#ifdef TS_HOST_ASAN
  __sanitizer_start_switch_fiber(&t->fake_stack, b.main_bottom, b.main_size);
#endif
  *t->sink = std::move(*t->sink).resume();
#ifdef TS_HOST_ASAN
  __sanitizer_finish_switch_fiber(t->fake_stack, &b.main_bottom, &b.main_size);
#endif
}

void Resume(Block& b, Thread& t) {
  b.current = &t;
#ifdef TS_HOST_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, t.stack, kStackBytes);
#endif
  t.fiber = std::move(t.fiber).resume();
#ifdef TS_HOST_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  b.current = nullptr;
}

const char* StateName(State s) {
  switch (s) {
    case State::kReady:
      return "is running";
    case State::kBarrier:
      return "waits at __syncthreads";
    case State::kWarp:
      return "waits at another warp operation";
    case State::kDone:
      return "has exited";
  }
  return "?";
}

// The source lane of lane `lane` for a shuffle, or -1 when it keeps its own value.
int SourceLane(const Thread& t, int lane) {
  const int w = t.width, seg = lane / w * w, in = lane % w;
  switch (t.kind) {
    case WarpKind::kShfl:
      return seg + (t.arg % w + w) % w;
    case WarpKind::kShflXor: {
      const int src = lane ^ t.arg;
      return src / w == lane / w ? src : -1;
    }
    case WarpKind::kShflDown:
      return in + t.arg < w ? lane + t.arg : -1;
    case WarpKind::kShflUp:
      return in - t.arg >= 0 ? lane - t.arg : -1;
    default:
      return -1;
  }
}

// Completes the warp operation that lane `first` of warp `warp` waits at, with every lane of its
// mask; returns false after a fault.
bool ResolveWarp(std::vector<Thread>& threads, int warp, int first) {
  Thread& t0 = threads[warp * 32 + first];
  const unsigned mask = t0.mask;
  const int n = static_cast<int>(threads.size());
  for (int lane = 0; lane < 32; ++lane) {
    if (!(mask >> lane & 1u)) continue;
    const int i = warp * 32 + lane;
    if (i >= n) {
      BlockFault(t0, std::string(t0.what) + " with mask " + Hex(mask) + ": lane " +
                         std::to_string(lane) + " is not a thread of the block (blockDim " +
                         std::to_string(n) + ")");
      return false;
    }
    const Thread& o = threads[i];
    if (o.state != State::kWarp) {
      BlockFault(t0, std::string(t0.what) + " with mask " + Hex(mask) + ": lane " +
                         std::to_string(lane) + " (thread " + Str(o.idx) + ") " +
                         StateName(o.state));
      return false;
    }
    if (o.mask != mask || o.kind != t0.kind) {
      BlockFault(t0, std::string(t0.what) + " with mask " + Hex(mask) + ": lane " +
                         std::to_string(lane) + " (thread " + Str(o.idx) + ") waits at " + o.what +
                         " with mask " + Hex(o.mask));
      return false;
    }
  }
  unsigned ballot = 0;
  for (int lane = 0; lane < 32; ++lane) {
    if ((mask >> lane & 1u) && threads[warp * 32 + lane].value != 0) ballot |= 1u << lane;
  }
  for (int lane = 0; lane < 32; ++lane) {
    if (!(mask >> lane & 1u)) continue;
    Thread& t = threads[warp * 32 + lane];
    if (t.kind == WarpKind::kBallot) {
      t.result = ballot;
    } else if (t.kind == WarpKind::kSync) {
      t.result = 0;
    } else {
      const int src = SourceLane(t, lane);
      if (src < 0) {
        t.result = t.value;
      } else if (!(mask >> src & 1u)) {
        BlockFault(t, std::string(t.what) + " with mask " + Hex(mask) + " reads lane " +
                          std::to_string(src) + ", which is not in the mask");
        return false;
      } else {
        t.result = threads[warp * 32 + src].value;
      }
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    if (mask >> lane & 1u) threads[warp * 32 + lane].state = State::kReady;
  }
  return true;
}

// Runs one block to its end or its first fault.
void RunBlock(Block& b, std::vector<Thread>& threads, const std::function<void()>& body) {
  for (Thread& t : threads) {
    t.state = State::kReady;
    t.stack = t_stacks.Take();
    Thread* tp = &t;
    t.fiber =
        ctx::fiber(std::allocator_arg, GivenStack{t.stack}, [tp, &body, &b](ctx::fiber&& sink) {
#ifdef TS_HOST_ASAN
          __sanitizer_finish_switch_fiber(nullptr, &b.main_bottom, &b.main_size);
#endif
          tp->sink = &sink;
          body();
          tp->state = State::kDone;
#ifdef TS_HOST_ASAN
          __sanitizer_start_switch_fiber(nullptr, b.main_bottom, b.main_size);
#endif
          return std::move(sink);
        });
  }
  const int n = static_cast<int>(threads.size());
  while (!b.faulted) {
    for (Thread& t : threads) {
      if (t.state != State::kReady) continue;
      Resume(b, t);
      if (b.faulted) break;
    }
    if (b.faulted) break;
    bool all_done = true, progress = false, any_warp = false;
    for (const Thread& t : threads) all_done = all_done && t.state == State::kDone;
    if (all_done) break;
    for (int i = 0; i < n && !b.faulted; ++i) {
      if (threads[i].state != State::kWarp) continue;
      any_warp = true;
      progress = ResolveWarp(threads, i / 32, i % 32) || progress;
    }
    if (b.faulted || progress) continue;
    if (any_warp) {  // unreachable: an unresolved warp operation faults in ResolveWarp
      for (const Thread& t : threads) {
        if (t.state == State::kWarp) BlockFault(t, std::string(t.what) + " never completed");
      }
      break;
    }
    // Every live thread waits at the barrier: it must be every thread.
    const Thread* waiting = nullptr;
    for (const Thread& t : threads) {
      if (t.state == State::kBarrier) waiting = &t;
    }
    for (const Thread& t : threads) {
      if (t.state != State::kBarrier) {
        BlockFault(*waiting, "__syncthreads is not reached by thread " + Str(t.idx) + ", which " +
                                 StateName(t.state));
        break;
      }
    }
    if (b.faulted) break;
    ++t_interval;
    for (Thread& t : threads) t.state = State::kReady;
  }
  // Unfinished fibers (after a fault) unwind when destroyed.
  for (Thread& t : threads) {
    t.fiber = ctx::fiber();
    t_stacks.free.push_back(t.stack);
    t.stack = nullptr;
  }
}

}  // namespace

namespace {

std::string ThreadName(int linear) {
  const dim3& d = t_block_dim;
  const unsigned i = static_cast<unsigned>(linear);
  return Str(uint3{i % d.x, i / d.x % d.y, i / (d.x * d.y)});
}

const char* AccessName(SharedAccessKind kind) {
  switch (kind) {
    case SharedAccessKind::kRead:
      return "reads";
    case SharedAccessKind::kWrite:
      return "writes";
    case SharedAccessKind::kAtomic:
      return "atomically updates";
  }
  return "?";
}

// The other thread recorded in `who` (-2: several), or -1 when only `me` (or nobody) is.
int Other(int32_t who, int me) { return who == -1 || who == me ? -1 : who; }

}  // namespace

void SharedAccess(SharedShadow& s, SharedAccessKind kind, const char* array, size_t index) {
  if (t_block == nullptr || t_block->current == nullptr) return;  // host code: not a kernel
  Thread& t = *t_block->current;
  const int me = t.linear;
  if (kind != SharedAccessKind::kWrite && s.written_in != t_block_serial) {
    BlockFault(t, std::string("shared ") + array + "[" + std::to_string(index) + "]: it " +
                      AccessName(kind) + " an element no thread of this block has written");
    return;
  }
  if (s.interval != t_interval) s = SharedShadow{t_interval, -1, -1, -1, s.written_in};
  int other = -1;
  const char* did = "";
  if ((other = Other(s.writer, me)) != -1) {
    did = "wrote";
  } else if (kind != SharedAccessKind::kRead && (other = Other(s.reader, me)) != -1) {
    did = "read";
  } else if (kind != SharedAccessKind::kAtomic && (other = Other(s.atomic, me)) != -1) {
    did = "atomically updated";
  }
  if (other != -1) {
    BlockFault(
        t, std::string("shared-memory race on ") + array + "[" + std::to_string(index) + "]: it " +
               AccessName(kind) + " what " +
               (other == -2 ? std::string("several threads") : "thread " + ThreadName(other)) +
               " " + did + " since the last __syncthreads");
    return;
  }
  int32_t& slot = kind == SharedAccessKind::kRead    ? s.reader
                  : kind == SharedAccessKind::kWrite ? s.writer
                                                     : s.atomic;
  slot = slot == -1 || slot == me ? me : -2;
  if (kind != SharedAccessKind::kRead) s.written_in = t_block_serial;
}

void SharedIndexFault(const char* array, long long index, size_t count) {
  if (t_block == nullptr || t_block->current == nullptr) return;
  BlockFault(*t_block->current, std::string("shared array ") + array + "[" + std::to_string(count) +
                                    "] indexed at " + std::to_string(index));
}

const uint3& CurrentThreadIdx() { return t_block->current->idx; }
const uint3& CurrentBlockIdx() { return t_block_idx; }
const dim3& CurrentBlockDim() { return t_block_dim; }
const dim3& CurrentGridDim() { return t_grid_dim; }

void SyncThreads() {
  Thread* t = t_block->current;
  t->state = State::kBarrier;
  Yield();
}

uint64_t WarpOp(WarpKind kind, const char* what, unsigned mask, uint64_t value, int arg,
                int width) {
  Thread* t = t_block->current;
  const int lane = t->linear % 32;
  if (!(mask >> lane & 1u)) {
    BlockFault(*t, std::string(what) + " with mask " + Hex(mask) + " leaves out the calling lane " +
                       std::to_string(lane));
    Yield();  // never resumed: the block stops
  }
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0) {
    BlockFault(*t, std::string(what) + ": width " + std::to_string(width) +
                       " is not a power of 2 up to 32");
    Yield();
  }
  t->state = State::kWarp;
  t->kind = kind;
  t->what = what;
  t->mask = mask;
  t->value = value;
  t->arg = arg;
  t->width = width;
  Yield();
  return t->result;
}

void DynamicSharedMemory(void** data, SharedShadow** shadow, size_t* bytes) {
  *data = t_dynamic.data();
  *shadow = t_dynamic_shadow.data();
  *bytes = t_dynamic_bytes;
}

void ExecuteKernel(const char* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                   const std::function<void()>& body) {
  // 16 bytes more, so that the view of a 0-byte launch still has a valid address.
  if (t_dynamic.size() < shared_bytes + 16) t_dynamic.resize(shared_bytes + 16);
  if (t_dynamic_shadow.size() < shared_bytes + 16) t_dynamic_shadow.resize(shared_bytes + 16);
  t_dynamic_bytes = shared_bytes;
  Block b;
  b.kernel = kernel;
  Block* outer = t_block;
  t_block = &b;
  t_grid_dim = grid;
  t_block_dim = block;
  const unsigned n = block.x * block.y * block.z;
  std::vector<Thread> threads(n);
  b.threads = &threads;
  for (unsigned z = 0; z < grid.z && !b.faulted; ++z) {
    for (unsigned y = 0; y < grid.y && !b.faulted; ++y) {
      for (unsigned x = 0; x < grid.x && !b.faulted; ++x) {
        t_block_idx = {x, y, z};
        for (unsigned i = 0; i < n; ++i) {
          threads[i].linear = static_cast<int>(i);
          threads[i].idx = {i % block.x, i / block.x % block.y, i / (block.x * block.y)};
        }
        ++t_interval;
        ++t_block_serial;
        RunBlock(b, threads, body);
      }
    }
  }
  t_block = outer;
}

}  // namespace tinyserve::gpu_host
