// Every runtime setting, its default and its environment variable, in one
// place. `options::from_environment()` starts from the defaults and applies
// any WARPSTORE_* variable that is set; explicit assignments come after.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace warpstore {

enum class controller_kind { host, memory, automatic, nvme_model, nvme };
enum class direct_io { off, automatic, on };
// How the host controller delivers bytes into GPU memory.
enum class delivery {
  gpu_pull,     // controller reads into pinned staging; the waiting warp copies it in
  copy_engine,  // controller pushes staging into the cache line with cudaMemcpyAsync
};

// The deepest queue pair (NVMe allows 65536 entries; a warpstore pair's
// staging grows with it): WARPSTORE_QUEUE_DEPTH and queue_pairs agree on it.
inline constexpr std::uint32_t max_queue_depth = 4096;

// The cores this process may use: its affinity mask, shared among the
// processes torchrun started on this node (LOCAL_WORLD_SIZE). At least 1.
std::uint32_t process_cores();

// Service threads a host controller runs on unless set: a quarter of
// process_cores(), 1 to 4. The threads belong to the process's one I/O
// engine, which every host controller shares and which grows to the largest
// count asked for; they sleep whenever nothing is in flight.
std::uint32_t default_service_threads();

struct options {
  // Cache (WARPSTORE_CACHE_BYTES, WARPSTORE_LINE_SIZE, WARPSTORE_CACHE_WAYS).
  std::size_t cache_bytes = std::size_t{1} << 30;
  std::uint32_t line_size = 4096;  // power of two, 512 B to 64 KiB
  std::uint32_t ways = 16;         // lines per set
  // Controller (WARPSTORE_CONTROLLER = auto | host | memory | nvme-model | nvme).
  // auto: a read-only file that is in the page cache and at most
  // mapped_max_bytes gets the memory controller over the page cache itself
  // (mapped and pinned, no copy); any other file the host controller; a
  // path `nvme://<PCI address>[/ns<N>]` the nvme controller.
  // nvme-model: GPU threads drive the software NVMe device over the file
  // (src/controller/nvme_controller.h); never chosen by auto.
  // nvme: GPU threads drive a real NVMe device through VFIO; the path names
  // it (`nvme://0000:65:00.0`, namespace 1, or `nvme://0000:65:00.0/ns2`)
  // and no other controller takes such a path.
  controller_kind controller = controller_kind::automatic;
  // The largest file controller=auto maps (WARPSTORE_MAPPED_MAX_BYTES; 0:
  // an eighth of the machine's memory).
  std::uint64_t mapped_max_bytes = 0;
  // Host controller (WARPSTORE_THREADS, WARPSTORE_QUEUES, WARPSTORE_QUEUE_DEPTH,
  // WARPSTORE_DIRECT = off | auto | on, WARPSTORE_DELIVERY = pull | copy,
  // WARPSTORE_URING_DEPTH).
  std::uint32_t service_threads = default_service_threads();
  std::uint32_t queue_pairs = 0;  // 0: one per multiprocessor (capped at 128)
  std::uint32_t queue_depth = 256;  // power of two, 2 to 4096
  direct_io direct = direct_io::automatic;
  delivery deliver = delivery::gpu_pull;
  std::uint32_t uring_depth = 128;  // io_uring entries per service unit
  // Buffered WRITEs of all service threads go to one writer thread that
  // sorts what is pending and merges neighbours into one pwritev
  // (WARPSTORE_COMBINE_WRITES = 0 | 1). O_DIRECT writes go through io_uring.
  bool combine_writes = true;
  // Read combining (WARPSTORE_COMBINE_READS = 0 | 1): a service thread sorts
  // the whole-line READs of a round by offset and sends each run of
  // neighbours as one readv (up to combined_read_bytes), as readahead would
  // for a batch that touches a dense part of the file. Off until measured.
  bool combine_reads = false;
  // Read-ahead (WARPSTORE_READ_AHEAD, WARPSTORE_READ_AHEAD_CACHE): a host
  // controller reading a read-only file with O_DIRECT reads a whole extent
  // of read_ahead bytes (aligned) once three misses fall in it close
  // together (more, where extents read so far served fewer lines than they
  // cost), and serves its lines from memory, as the kernel's readahead
  // does for a mapped file; sparse misses are read line by line. It holds
  // read_ahead_cache bytes of extents. 0: off.
  std::uint32_t read_ahead = 128u << 10;
  std::size_t read_ahead_cache = std::size_t{128} << 20;
  // Queue spread (WARPSTORE_QUEUE_SPREAD = 0 | 1): the warps of one
  // multiprocessor pick different queue pairs, so a kernel confined to a few
  // multiprocessors still reaches every service thread; 0: one pair per
  // multiprocessor. Off until measured.
  bool queue_spread = false;
  // Python gathers on the GPU (WARPSTORE_GATHER_SM_SHARE): 0 runs a gather
  // on every multiprocessor (two 256-thread blocks each, 40 % of the
  // register file); N >= 1 on 1/N of them, one 1024-thread block each, so
  // a training step's large kernels find whole multiprocessors free beside
  // an asynchronous gather (best with queue_spread). Default 0 until measured.
  std::uint32_t gather_sm_share = 0;
  // Bulk reads (WARPSTORE_BULK_CHUNK): the most bytes one thread reads into
  // a pinned buffer and copies to the GPU at a time, a power of two from
  // 64 KiB to 4 MiB.
  std::uint32_t bulk_chunk = 4u << 20;
  // Sorted gathers (WARPSTORE_GATHER_SORT_ROWS): a Python gather on the GPU
  // of at least this many positions, over the memory controller, takes its
  // rows in file order (a radix sort of the indices first) while the
  // array's large gathers miss: a GPU reads random rows of host memory at
  // about 60 M a second whatever their size, because its translations of
  // host pages miss beyond about 512 MiB, and 1.6 to 6.6 times as fast in
  // file order (bench/host_read_probe.cu). 0: never. Only for arrays larger
  // than gather_sort_bytes (WARPSTORE_GATHER_SORT_BYTES): within 512 MiB
  // random rows read as fast as sorted ones, and at 1 GiB only rows under
  // 512 bytes gain.
  std::uint64_t gather_sort_rows = 16384;
  std::uint64_t gather_sort_bytes = std::uint64_t{1} << 30;
  // Miss admission (WARPSTORE_GATHER_MISS_ADMIT): a Python gather on the
  // GPU of rows smaller than a line, over the memory controller and not
  // sorted, while the array's gathers miss on at least 3 lookups in 4
  // (until fewer than 1 in 2), fills a missed line one time in this many
  // and reads the other rows it misses straight from host memory
  // (array_ref::admit_misses): a cache that cannot hold the working set
  // then costs a row what the row is, not a line. 0 or 1: every miss fills.
  std::uint32_t gather_miss_admit = 8;
  // Memory-controller fills (WARPSTORE_MEMORY_FILL_TOGETHER): a warp that
  // misses several lines at once copies those of at most this many bytes
  // together, each line by a share of its lanes (one trip over PCIe for
  // many small lines); larger lines go one after another, each by the
  // whole warp, which keeps every lane busy from 2 KiB up (shares that do
  // not divide the warp left lanes idle for some counts of lines: 4 KiB
  // lines, nine at once, took 30 rounds of loads against 18). 0: always
  // one after another.
  std::uint32_t memory_fill_together = 1024;
  // Fetch priority (WARPSTORE_FETCH_PRIORITY = 0 | 1): the PyG feature
  // store's fetch-ahead gathers run on a stream of the highest priority, so
  // the block scheduler hands their blocks the next free multiprocessors
  // before queued training blocks (with gather_sm_share, the gather then
  // keeps up on its share of them). Off until measured.
  bool fetch_priority = false;
  // Write-behind: each time the host controller's write thread (or the
  // memory controller's write-out at a flush) has written this many bytes,
  // the kernel is asked to start writing the file's dirty pages to storage
  // (sync_file_range, no waiting), so the fdatasync that follows finds less
  // left (WARPSTORE_WRITE_BEHIND_BYTES; 0: off).
  std::uint64_t write_behind_bytes = std::uint64_t{32} << 20;
  // Eager write-back (WARPSTORE_EAGER_WRITE_BACK = 0 | 1): a warp whose
  // write_span completes a whole write-back cluster of lines (all 32 dirty,
  // none in use) writes the cluster back at once, so streaming output goes to
  // storage in whole clusters while the kernel runs rather than at eviction
  // or flush.
  bool eager_write_back = true;
  // Overlapped eviction (WARPSTORE_OVERLAPPED_EVICTION = 0 | 1): a warp that
  // must evict a dirty line of its own array to make room takes the slot at
  // once, and the WRITE of the old bytes and the READ of its new line go to
  // the controller in one trip, in flight together, instead of one after
  // the other (write back, then look again, then fill). Off: the warp
  // writes the line back and waits before it looks again.
  bool overlapped_eviction = true;
  // Waits (WARPSTORE_TIMEOUT_MS): any spin longer than this is an error.
  std::uint64_t timeout_ns = 10'000'000'000ull;
  // Device-side index checks (WARPSTORE_BOUNDS_CHECK = 0 | 1).
  bool bounds_check = true;
  // Open the backing file read-write (WARPSTORE_WRITABLE = 0 | 1). A
  // read-only open refuses WRITE commands and array stores.
  bool writable = false;

  static options from_environment();
  // Raises std::invalid_argument naming the first bad setting.
  void validate() const;
};

const char* to_string(controller_kind k);
const char* to_string(direct_io d);
const char* to_string(delivery d);
controller_kind parse_controller(const std::string& s);
direct_io parse_direct(const std::string& s);
delivery parse_delivery(const std::string& s);
// "4096", "64K", "2GiB", "1.5G" -> bytes.
std::size_t parse_size(const std::string& s);

}  // namespace warpstore
