// host_controller::worker: one service unit of the process's I/O engine (see
// io_engine.h): the queue pairs it owns, its io_uring, its staging and its
// per-command state. An engine thread runs its rounds. Its methods are spread
// by idea over service_thread.cpp (setup, the round, drain),
// nvme_commands.cpp, uring_io.cpp, write_combiner.cpp and fault_injection.cpp.
// Private to src/controller/.
#pragma once

#include <liburing.h>
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "controller/fault_policy.h"
#include "controller/host_controller.h"
#include "controller/io_engine.h"
#include "controller/read_ahead.h"
#include "controller/write_combiner.h"
#include "warpstore/nvme.h"
#include "warpstore/runtime.h"

namespace warpstore {

// One service unit and the queues it owns.
class host_controller::worker final : public host_detail::service_unit {
 public:
  worker(host_controller& owner, std::uint32_t id, const std::vector<std::uint32_t>& queue_ids,
         const options& opts);
  ~worker() override;
  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;

  // service_unit: called by one engine thread at a time.
  bool round() override;
  bool busy() const override {
    return inflight_ > 0 || combining_ > 0 || !to_read_.empty() || !parked_.empty() ||
           flights_head_ < flights_.size();
  }
  void wait_briefly(long long ns) override;
  bool announced() const override;
  bool released(std::uint64_t since) const override;
  void stopped(std::exception_ptr e) noexcept override;

  // Waits (bounded) for reads and writes still in flight, so the kernel never
  // writes into buffers after they are freed. Once detached from the engine.
  void drain() noexcept;
  std::uint32_t id() const { return id_; }
  bool registered() const { return registered_buffers_; }
  // From the write combiner's thread: these WRITEs of ours are done.
  void writes_done(const write_combiner::item* first, std::size_t n);

 private:
  // One fetched command, from the SQE copy until its completion is posted.
  struct command_ctx {
    nvme::command cmd;
    nvme::opcode op = nvme::opcode::read;
    bool buffered_fd = false;         // O_DIRECT file: a partial last block goes through the buffered fd
    std::uint32_t generation = 0;     // WRITE: flushes fetched before it; FLUSH: its own number
    std::byte* buffer = nullptr;      // where the file's bytes land on the CPU side
    std::uint64_t offset = 0;         // file offset of the first byte
    std::uint32_t length = 0;         // bytes the command transfers
    std::uint32_t file_bytes = 0;     // bytes that exist in the file; the rest reads as zero
    std::uint32_t request_bytes = 0;  // bytes asked of the kernel (O_DIRECT: aligned up)
    std::uint32_t done = 0;           // bytes read so far
    std::uint32_t dw0 = 0;            // completion dword 0: errno of a failed read, write or flush
    fault_action fault;               // what the fault policy made of it (tests)
    bool write_hooked = false;        // WRITE: the policy saw write_starting
    bool alone = false;               // READ: never combined (a run's read fell short of it)
    std::uint64_t flush_ticket = 0;   // FLUSH: the policy's flush_starting ticket
    std::uint64_t sync_started = 0;   // FLUSH: steady_ns() when its fdatasync went out
    nvme::status status;
    std::uint32_t queue = 0;  // index into queues_
    std::uint32_t index = 0;  // index into its queue's contexts
  };

  struct queue_ctx {
    queue_pair_ref ref{};
    std::uint32_t index = 0;         // in the controller's queue_pairs
    std::uint32_t mask = 0;          // depth - 1
    std::uint32_t sq_head = 0;       // next SQ index to fetch
    std::uint32_t cq_tail = 0;       // next CQ index to post
    std::uint32_t last_tail = 0;     // SQ tail doorbell value last seen
    bool phase = true;               // phase tag of the current CQ pass
    bool doorbell_fault = false;     // a bad doorbell value was already reported
    std::byte* read_base = nullptr;  // depth * slot_bytes the reads land in
    std::vector<command_ctx> contexts;
    std::vector<std::uint32_t> free;     // stack of free context indices
    std::vector<std::uint32_t> pending;  // ring of contexts waiting to be posted
    std::uint32_t pending_head = 0;
    std::uint32_t pending_count = 0;
    // FLUSH ordering: writes in flight per generation (ring of depth; at most
    // depth generations are live, since each holds a context) and the
    // flushes not yet started, oldest first.
    std::uint32_t generation = 0;
    std::vector<std::uint32_t> generation_writes;
    std::vector<std::uint32_t> flushes;
    std::uint32_t flush_head = 0;
    std::uint32_t flush_count = 0;
  };

  // The value the GPU wrote to one of q's doorbells (`queue` "SQ" or "CQ",
  // `which` "tail" or "head"); false where it lies beyond the ring: a
  // controller would raise an invalid-doorbell-write event; this one ignores
  // the write and reports it once a queue.
  bool read_doorbell(queue_ctx& q, std::uint32_t* doorbell, const char* queue,
                     const char* which, std::uint32_t& value);

  // Round steps; each returns whether it did anything.
  bool fetch();
  bool submit();
  bool reap();
  bool collect_writes();
  bool post();

  void start(queue_ctx& q, command_ctx& c);
  void start_flush(queue_ctx& q, command_ctx& c);
  void start_flushes(queue_ctx& q);
  void write_done(command_ctx& c, nvme::status st, std::uint32_t dw0 = 0);
  void queue_io(command_ctx& c);
  void queue_line(command_ctx& c);
  bool try_read_ahead(command_ctx& c);
  bool serve_parked();
  void read_extent(const host_detail::read_ahead::load& l);
  void prep_io(command_ctx& c);
  void prep_reads();
  void on_run_result(std::uintptr_t run, int res);
  void on_result(command_ctx& c, int res);
  void fail_io(command_ctx& c, int err, const char* what);
  void flush_uploads();
  void flush_copies();
  bool finish_copies();
  void complete(command_ctx& c, nvme::status st, std::uint32_t dw0 = 0);
  void enqueue_post(command_ctx& c);
  bool inject_fault(command_ctx& c);
  bool release_held();
  io_uring_sqe* next_sqe();
  void flush_counters();

  host_controller& owner_;
  const backing_file& file_;
  std::uint32_t id_;
  std::uint32_t slot_bytes_;
  std::uint64_t capacity_blocks_;
  std::uint64_t file_size_;
  bool direct_;
  std::uint32_t direct_alignment_;
  bool gpu_pull_;
  std::uint64_t drain_timeout_ns_;

  fault_policy* faults_;      // null outside tests
  held_completions held_;    // completions a fault holds back
  std::vector<queue_ctx> queues_;
  std::uint32_t next_queue_ = 0;  // round-robin start of fetch, for fairness

  io_uring ring_{};
  bool ring_ready_ = false;
  bool registered_buffers_ = false;
  bool registered_file_ = false;
  bool can_wait_timeout_ = false;  // the kernel takes a timeout without an SQE
  std::uint32_t max_inflight_ = 0;
  std::uint32_t inflight_ = 0;     // reads submitted to io_uring, not yet reaped
  std::uint32_t unsubmitted_ = 0;  // SQEs prepared since the last submit

  // copy_engine delivery: our own staging and a copy stream into GPU memory.
  runtime::host_mapped_ptr<std::byte> own_staging_;
  std::unique_ptr<runtime::copy_stream> copies_;
  std::vector<command_ctx*> copy_batch_;
  // Reads whose copies are on the copy engine, in launch order: their
  // completions go out when their batch's mark is done (finish_copies), so
  // the thread goes on reading meanwhile.
  struct copy_flight {
    std::uint64_t mark;
    std::uint32_t count;  // the next `count` of copying_
  };
  std::vector<command_ctx*> copying_;
  std::vector<copy_flight> flights_;
  std::size_t copying_head_ = 0, flights_head_ = 0;
  std::vector<command_ctx*> upload_batch_;  // WRITEs whose bytes are being copied from the GPU
  bool writable_;

  // Buffered WRITEs handed to the owner's write combiner (null: none).
  write_combiner* combiner_;
  std::vector<write_combiner::item> to_combine_;  // this round's WRITEs, not yet handed over
  std::uint32_t combining_ = 0;  // handed over (or about to be), result not yet collected
  std::mutex done_mutex_;
  std::vector<write_combiner::item> done_, done_local_;
  std::atomic<bool> done_ready_{false};

  // Read combining (options::combine_reads): this round's whole-line READs,
  // and the runs of neighbours in flight as one readv each. A run's
  // io_uring user data is its index in runs_ shifted left, with bit 0 set
  // (a command_ctx pointer is aligned, so bit 0 tells them apart).
  struct read_run {
    std::vector<command_ctx*> members;  // in file order
    std::vector<iovec> iov;
  };
  static constexpr std::uint32_t max_run_commands = 64;
  static constexpr std::uint64_t max_run_bytes = std::uint64_t{1} << 20;
  bool combine_reads_;
  std::vector<command_ctx*> to_read_;
  std::vector<read_run> runs_;
  std::vector<std::uint32_t> free_runs_;

  // Read-ahead (options::read_ahead; null: off): the controller's extents,
  // and the READs waiting for an extent being read (by this unit or
  // another), with when they began to wait. An extent read's io_uring user
  // data is its slot shifted left by two, with bit 1 set.
  host_detail::read_ahead* read_ahead_;
  struct parked_read {
    command_ctx* c;
    std::uint64_t since;
    std::uint32_t slot;  // the extent slot it waits for (read_ahead::loading)
  };
  std::vector<parked_read> parked_;
  // A READ waits this long for another unit's extent at most, then reads
  // its line itself.
  static constexpr std::uint64_t park_limit_ns = 1'000'000'000;

  // Counted locally, published once per round.
  std::uint64_t n_commands_ = 0, n_errors_ = 0, n_bytes_ = 0, n_doorbells_ = 0;
};

}  // namespace warpstore
