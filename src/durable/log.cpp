// Host side of the write-ahead log (include/warpstore/durable/log.cuh):
// format, open, scan, recovery, truncation, host commits. Every byte goes
// through the queues of the controllers (detail::run_block_io runs the
// transfers on this target: GPU warps, or CPU threads), so the log behaves
// under crashes exactly as the kernels that append to it do.
#include "warpstore/durable/log.cuh"

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace warpstore::durable {

namespace {

// What a log_error knows: the log's file, the kind, and the LBA (and byte
// offset) of a failed command.
error_info log_info(error_kind kind, const std::string& path,
                    std::optional<std::uint64_t> lba = std::nullopt) {
  error_info i;
  i.kind = kind;
  i.path = path;
  if (lba) {
    i.lba = *lba;
    i.offset = *lba * nvme::block_size;
  }
  return i;
}

std::string byte_text(std::uint64_t lba) {
  return "LBA " + std::to_string(lba) + " (byte " + std::to_string(lba * nvme::block_size) + ")";
}

// Transfers through one controller's queues.
class block_mover {
 public:
  explicit block_mover(controller& ctl) : ctl_(ctl) {}

  // Reads (or writes) `reqs` between storage and `buffer` (GPU memory);
  // raises log_error naming `what` and the first failed command.
  void transfer(bool write, const std::vector<detail::block_io_request>& reqs, std::byte* buffer,
                const std::string& what) {
    if (reqs.empty()) return;
    auto dreqs = runtime::make_device<detail::block_io_request>(reqs.size(), false);
    auto statuses = runtime::make_device<std::uint16_t>(reqs.size());
    runtime::copy_to_device(dreqs.get(), reqs.data(), reqs.size() * sizeof reqs[0]);
    detail::block_io_task task{ctl_.device_ref(), dreqs.get(), statuses.get(), buffer,
                               reqs.size(), write, false};
    detail::run_block_io(task);
    std::vector<std::uint16_t> st(reqs.size());
    runtime::copy_to_host(st.data(), statuses.get(), st.size() * sizeof st[0]);
    ctl_.check();
    for (std::size_t i = 0; i < st.size(); ++i) {
      const nvme::status s{st[i]};
      if (!s.success())
        throw log_error(ctl_.file().path() + ": " + what + ": " +
                            (write ? "writing " : "reading ") + std::to_string(reqs[i].blocks) +
                            " blocks at " + byte_text(reqs[i].slba) + " failed: " + describe(s),
                        s, log_info(kind_of(s), ctl_.file().path(), reqs[i].slba));
    }
  }

  // A FLUSH through the queues, then the controller's make_durable().
  void flush(const std::string& what) {
    auto status = runtime::make_device<std::uint16_t>(1);
    detail::block_io_task task{ctl_.device_ref(), nullptr, status.get(), nullptr, 0, false, true};
    detail::run_block_io(task);
    std::uint16_t raw = 0;
    runtime::copy_to_host(&raw, status.get(), sizeof raw);
    ctl_.check();
    if (!nvme::status{raw}.success())
      throw log_error(
          ctl_.file().path() + ": " + what + ": FLUSH failed: " + describe(nvme::status{raw}),
          nvme::status{raw}, log_info(kind_of(nvme::status{raw}), ctl_.file().path()));
    ctl_.make_durable();
  }

 private:
  controller& ctl_;
};

// Requests for lines [first, first + n) of `line_size` bytes from LBA
// `base`, landing at buffer offset (line - first) * line_size; lines are
// clipped at `capacity_blocks`.
std::vector<detail::block_io_request> line_requests(std::uint64_t base, std::uint64_t first,
                                                    std::uint64_t n, std::uint32_t line_size,
                                                    std::uint64_t capacity_blocks) {
  const std::uint32_t per = line_size >> nvme::block_shift;
  std::vector<detail::block_io_request> reqs;
  reqs.reserve(n);
  for (std::uint64_t k = 0; k < n; ++k) {
    const std::uint64_t slba = base + (first + k) * per;
    if (slba >= capacity_blocks) break;
    const std::uint64_t left = capacity_blocks - slba;
    reqs.push_back({slba, static_cast<std::uint32_t>(left < per ? left : per), 0, k * line_size});
  }
  return reqs;
}

bool superblock_valid(const log_superblock& s) {
  return s.magic == log_magic && s.version == log_version &&
         s.checksum == detail::superblock_checksum(s);
}

// Encodes `e` at byte `pos` of region `region`, as log_ref::encode does.
void encode_host(std::byte* at, std::uint32_t epoch, std::uint32_t region, std::uint64_t pos,
                 const log_entry& e) {
  detail::encode_entry(epoch, region, pos, e,
                       [&](std::uint32_t k, std::uint64_t v) { std::memcpy(at + 8 * k, &v, 8); });
}

}  // namespace

void log_layout::validate() const {
  if (line_size < 512 || line_size > 65536 || !std::has_single_bit(line_size))
    throw invalid_argument("log line size " + std::to_string(line_size) +
                           " must be a power of two from 512 B to 64 KiB");
  if (regions == 0 || regions > (1u << 20))
    throw invalid_argument("log regions " + std::to_string(regions) +
                           " must be between 1 and 2^20");
  if (region_bytes == 0 || region_bytes % line_size != 0 || region_bytes > (1ull << 40))
    throw invalid_argument("log region bytes " + std::to_string(region_bytes) +
                           " must be a non-zero multiple of the line size " +
                           std::to_string(line_size));
}

struct write_ahead_log::scan_result {
  std::vector<scanned_entry> entries;
  std::uint32_t torn_regions = 0;
};

void write_ahead_log::format(controller& ctl, const log_layout& layout) {
  layout.validate();
  const std::string& path = ctl.file().path();
  if (!ctl.file().writable())
    throw log_error(path + ": formatting a log needs a writable open", nvme::status::ok(),
                    log_info(error_kind::invalid_argument, path));
  if (ctl.file().size_bytes() < layout.file_bytes())
    throw log_error(path + ": a log of " + std::to_string(layout.regions) + " regions of " +
                        std::to_string(layout.region_bytes) + " bytes needs " +
                        std::to_string(layout.file_bytes()) + " bytes; the file has " +
                        std::to_string(ctl.file().size_bytes()),
                    nvme::status::ok(), log_info(error_kind::invalid_argument, path));
  // Zeroes every region (a reused file must not hold entries that check),
  // a chunk of lines at a time, then the superblocks, then FLUSH.
  const std::uint32_t L = layout.line_size;
  const std::uint64_t lines = layout.file_bytes() / L;
  const std::uint64_t chunk = std::min<std::uint64_t>(lines, (16u << 20) / L);
  auto zeros = runtime::make_device<std::byte>(chunk * L);
  block_mover io(ctl);
  for (std::uint64_t first = superblock_lines; first < lines; first += chunk) {
    const std::uint64_t n = std::min(chunk, lines - first);
    io.transfer(true, line_requests(0, first, n, L, ctl.file().capacity_blocks()), zeros.get(),
                "formatting the log regions");
  }
  io.flush("formatting the log regions");
  std::vector<std::byte> sb(2 * std::size_t{L}, std::byte{0});
  log_superblock s{};
  s.magic = log_magic;
  s.version = log_version;
  s.line_size = L;
  s.regions = layout.regions;
  s.epoch = 1;
  s.region_bytes = layout.region_bytes;
  s.checksum = detail::superblock_checksum(s);
  std::memcpy(sb.data() + L, &s, sizeof s);  // copy B holds odd epochs; copy A stays invalid
  runtime::copy_to_device(zeros.get(), sb.data(), sb.size());
  io.transfer(true, line_requests(0, 0, 2, L, ctl.file().capacity_blocks()), zeros.get(),
              "writing the log superblocks");
  io.flush("writing the log superblocks");
}

write_ahead_log::write_ahead_log(std::shared_ptr<controller> ctl, const options& opts)
    : ctl_(std::move(ctl)), opts_(opts) {
  if (!ctl_) throw invalid_argument("write_ahead_log needs a controller");
  const std::string& path = ctl_->file().path();
  if (!ctl_->file().writable())
    throw log_error(path + ": a log must be opened writable", nvme::status::ok(),
                    log_info(error_kind::invalid_argument, path));
  const std::uint32_t L = opts.line_size;
  if (ctl_->file().size_bytes() < 2ull * L)
    throw log_error(path + ": too small to be a log", nvme::status::ok(),
                    log_info(error_kind::corrupt, path));
  auto buf = runtime::make_device<std::byte>(2 * std::size_t{L});
  block_mover(*ctl_).transfer(false, line_requests(0, 0, 2, L, ctl_->file().capacity_blocks()),
                              buf.get(), "reading the log superblocks");
  std::vector<std::byte> host(2 * std::size_t{L});
  runtime::copy_to_host(host.data(), buf.get(), host.size());
  log_superblock a{}, b{};
  std::memcpy(&a, host.data(), sizeof a);
  std::memcpy(&b, host.data() + L, sizeof b);
  const bool va = superblock_valid(a), vb = superblock_valid(b);
  if (!va && !vb)
    throw log_error(path + ": not a warpstore log (neither superblock copy checks)",
                    nvme::status::ok(), log_info(error_kind::corrupt, path));
  const log_superblock& s = !vb || (va && a.epoch > b.epoch) ? a : b;
  if (s.line_size != L)
    throw log_error(path + ": the log was formatted with " + std::to_string(s.line_size) +
                        "-byte lines; open it with options::line_size " +
                        std::to_string(s.line_size) + ", not " + std::to_string(L),
                    nvme::status::ok(), log_info(error_kind::invalid_argument, path));
  layout_ = log_layout{s.line_size, s.regions, s.region_bytes};
  try {
    layout_.validate();
  } catch (const std::invalid_argument& e) {
    throw log_error(path + ": bad log superblock: " + e.what(), nvme::status::ok(),
                    log_info(error_kind::corrupt, path));
  }
  if (ctl_->file().size_bytes() < layout_.file_bytes())
    throw log_error(path + ": the log needs " + std::to_string(layout_.file_bytes()) +
                        " bytes; the file has " + std::to_string(ctl_->file().size_bytes()),
                    nvme::status::ok(), log_info(error_kind::corrupt, path));
  epoch_ = s.epoch;
  ring_ = runtime::make_device<std::byte>(std::size_t{layout_.regions + 1} * 2 * L);
  tails_ = runtime::make_device<std::uint64_t>(std::size_t{layout_.regions + 1} * 2);
  errors_ = runtime::make_device<error_record>(1);
  host_line_.assign(layout_.region_bytes, std::byte{0});
}

write_ahead_log::~write_ahead_log() = default;

const std::string& write_ahead_log::path() const { return ctl_->file().path(); }

write_ahead_log::scan_result write_ahead_log::scan_regions() {
  const std::uint32_t L = layout_.line_size;
  const std::uint64_t region_lines = layout_.region_bytes / L;
  const std::uint32_t nregions = layout_.regions + 1;
  // Whole regions at a time, up to 64 MiB per transfer.
  const std::uint64_t per_chunk =
      std::max<std::uint64_t>(1, std::min<std::uint64_t>(nregions, (64ull << 20) / layout_.region_bytes));
  auto buf = runtime::make_device<std::byte>(per_chunk * layout_.region_bytes, false);
  std::vector<std::byte> host(per_chunk * layout_.region_bytes);
  block_mover io(*ctl_);
  scan_result out;
  for (std::uint32_t r0 = 0; r0 < nregions; r0 += static_cast<std::uint32_t>(per_chunk)) {
    const std::uint32_t n = static_cast<std::uint32_t>(std::min<std::uint64_t>(per_chunk, nregions - r0));
    io.transfer(false,
                line_requests(0, superblock_lines + std::uint64_t{r0} * region_lines,
                              n * region_lines, L, ctl_->file().capacity_blocks()),
                buf.get(), "scanning log regions " + std::to_string(r0) + ".." +
                               std::to_string(r0 + n - 1));
    runtime::copy_to_host(host.data(), buf.get(), n * layout_.region_bytes);
    for (std::uint32_t k = 0; k < n; ++k) {
      const std::uint32_t region = r0 + k;
      const std::byte* base = host.data() + k * layout_.region_bytes;
      std::uint64_t pos = 0;
      while (pos + sizeof(entry_header) <= layout_.region_bytes) {
        entry_header h;
        std::memcpy(&h, base + pos, sizeof h);
        if (h.magic != entry_magic || h.epoch != epoch_) break;  // the clean end
        const bool fits = h.payload_bytes + sizeof(entry_header) <= L &&
                          pos + detail::entry_bytes(h.payload_bytes) <= layout_.region_bytes &&
                          h.kind >= 1 && h.kind <= 3;
        bool good = fits;
        if (fits) {
          const std::byte* payload = base + pos + sizeof h;
          entry_header z = h;
          z.checksum = 0;
          detail::hasher hs(detail::entry_seed(epoch_, region, pos));
          const std::uint32_t words = detail::entry_bytes(h.payload_bytes) / 8;
          for (std::uint32_t w = 0; w < words; ++w) {
            // Padding must be zero too: entry_word pads with zeros.
            std::uint64_t v;
            if (w < 4) {
              v = detail::entry_word(z, payload, w);
            } else {
              std::memcpy(&v, base + pos + 8 * w, 8);
            }
            hs.add(v);
          }
          good = static_cast<std::uint32_t>(hs.h) == h.checksum;
        }
        if (!good) {
          ++out.torn_regions;  // an entry of this epoch that does not check: a torn tail
          break;
        }
        scanned_entry e;
        e.header = h;
        e.region = region;
        e.pos = pos;
        e.payload.assign(base + pos + sizeof h, base + pos + sizeof h + h.payload_bytes);
        out.entries.push_back(std::move(e));
        pos += detail::entry_bytes(h.payload_bytes);
      }
    }
  }
  return out;
}

std::vector<scanned_entry> write_ahead_log::scan(std::uint32_t* torn_regions) {
  scan_result r = scan_regions();
  if (torn_regions != nullptr) *torn_regions = r.torn_regions;
  return std::move(r.entries);
}

void write_ahead_log::write_superblock(std::uint32_t epoch) {
  const std::uint32_t L = layout_.line_size;
  std::vector<std::byte> line(L, std::byte{0});
  log_superblock s{};
  s.magic = log_magic;
  s.version = log_version;
  s.line_size = L;
  s.regions = layout_.regions;
  s.epoch = epoch;
  s.region_bytes = layout_.region_bytes;
  s.checksum = detail::superblock_checksum(s);
  std::memcpy(line.data(), &s, sizeof s);
  auto buf = runtime::make_device<std::byte>(L, false);
  runtime::copy_to_device(buf.get(), line.data(), L);
  block_mover(*ctl_).transfer(true, line_requests(0, epoch % 2, 1, L, ctl_->file().capacity_blocks()),
                              buf.get(), "writing the superblock of epoch " + std::to_string(epoch));
}

void write_ahead_log::reset_tails() {
  const std::uint32_t L = layout_.line_size;
  runtime::memset_device(ring_.get(), 0, std::size_t{layout_.regions + 1} * 2 * L);
  runtime::memset_device(tails_.get(), 0, std::size_t{layout_.regions + 1} * 2 * sizeof(std::uint64_t));
  runtime::memset_device(errors_.get(), 0, sizeof(error_record));
  std::fill(host_line_.begin(), host_line_.end(), std::byte{0});
  host_tail_ = 0;
}

recovery_report write_ahead_log::recover(controller* data, const recovery_hooks& hooks) {
  recovered_ = false;
  recovery_report rep;
  rep.epoch_found = epoch_;
  scan_result sr = scan_regions();
  rep.entries = sr.entries.size();
  rep.torn_regions = sr.torn_regions;
  std::set<std::uint64_t> committed, seen;
  for (const auto& e : sr.entries) {
    seen.insert(e.header.txn);
    if (e.header.kind == static_cast<std::uint8_t>(entry_kind::commit)) committed.insert(e.header.txn);
  }
  std::vector<const scanned_entry*> undo;
  std::set<std::uint64_t> partial;
  for (const auto& e : sr.entries) {
    if (committed.count(e.header.txn) != 0) continue;
    partial.insert(e.header.txn);
    if (e.header.kind == static_cast<std::uint8_t>(entry_kind::undo)) undo.push_back(&e);
  }
  rep.committed_txns = committed.size();
  rep.partial_txns = partial.size();
  rep.undone_txns.assign(partial.rbegin(), partial.rend());
  // Newest first: later transactions, and within a region later entries.
  std::sort(undo.begin(), undo.end(), [](const scanned_entry* a, const scanned_entry* b) {
    if (a->header.txn != b->header.txn) return a->header.txn > b->header.txn;
    if (a->region != b->region) return a->region < b->region;
    return a->pos > b->pos;
  });
  if (hooks.stop_after == recovery_step::scanned) return rep;

  const std::uint32_t L = layout_.line_size;
  if (!undo.empty()) {
    if (data == nullptr)
      throw log_error(path() + ": holds " + std::to_string(undo.size()) +
                          " before-images of unfinished transactions, but recovery was given no "
                          "data file to write them to",
                      nvme::status::ok(), log_info(error_kind::invalid_argument, path()));
    const std::uint64_t data_bytes = data->file().size_bytes();
    // The data lines the before-images cover: read them, patch them in undo
    // order on the host, write them back whole.
    std::map<std::uint64_t, std::size_t> line_index;
    for (const scanned_entry* e : undo) {
      const std::uint64_t t = e->header.target, n = e->header.payload_bytes;
      if (n == 0) continue;
      if (t > data_bytes || n > data_bytes - t)
        throw log_error(path() + ": a before-image of transaction " +
                            std::to_string(e->header.txn) + " (region " +
                            std::to_string(e->region) + ", byte " + std::to_string(e->pos) +
                            ") covers bytes " + std::to_string(t) + ".." + std::to_string(t + n) +
                            ", past the end of " + data->file().path() + " (" +
                            std::to_string(data_bytes) + " bytes)",
                        nvme::status::ok(), log_info(error_kind::corrupt, path()));
      for (std::uint64_t l = t / L; l <= (t + n - 1) / L; ++l) line_index.emplace(l, 0);
    }
    std::vector<detail::block_io_request> reqs;
    const std::uint32_t per = L >> nvme::block_shift;
    const std::uint64_t cap = data->file().capacity_blocks();
    for (auto& [line, idx] : line_index) {
      idx = reqs.size();
      const std::uint64_t slba = line * per, left = cap - slba;
      reqs.push_back({slba, static_cast<std::uint32_t>(left < per ? left : per), 0,
                      idx * std::uint64_t{L}});
    }
    auto buf = runtime::make_device<std::byte>(reqs.size() * L);
    block_mover dio(*data);
    dio.transfer(false, reqs, buf.get(), "reading data lines to undo");
    std::vector<std::byte> lines(reqs.size() * L);
    runtime::copy_to_host(lines.data(), buf.get(), lines.size());
    for (const scanned_entry* e : undo) {
      const std::uint64_t t = e->header.target;
      for (std::uint64_t k = 0; k < e->header.payload_bytes;) {
        const std::uint64_t at = t + k, line = at / L, in = at % L;
        const std::uint64_t n = std::min<std::uint64_t>(L - in, e->header.payload_bytes - k);
        std::memcpy(lines.data() + line_index.at(line) * L + in, e->payload.data() + k, n);
        k += n;
      }
      ++rep.undone_entries;
    }
    runtime::copy_to_device(buf.get(), lines.data(), lines.size());
    dio.transfer(true, reqs, buf.get(), "writing before-images back");
    rep.lines_restored = reqs.size();
    if (hooks.stop_after == recovery_step::undo_written) return rep;
    dio.flush("making the undone data durable");
  } else if (hooks.stop_after == recovery_step::undo_written) {
    return rep;
  }
  if (hooks.stop_after == recovery_step::undo_durable) return rep;

  // Truncation: the superblock copy not holding the current epoch.
  const std::uint32_t next = epoch_ + 1;
  write_superblock(next);
  if (hooks.stop_after == recovery_step::superblock_written) return rep;
  block_mover(*ctl_).flush("truncating the log (epoch " + std::to_string(next) + ")");
  epoch_ = next;
  reset_tails();
  recovered_ = true;
  rep.epoch_now = epoch_;
  rep.completed = true;
  return rep;
}

log_ref write_ahead_log::ref() const {
  if (!recovered_) throw logic_error(path() + ": recover() the log before appending to it", path());
  const std::uint32_t L = layout_.line_size;
  log_ref r{};
  r.io = ctl_->device_ref();
  r.ring = ring_.get();
  r.tails = tails_.get();
  r.errors = errors_.get();
  r.first_block = std::uint64_t{superblock_lines} * (L >> nvme::block_shift);
  r.region_bytes = layout_.region_bytes;
  r.line_size = L;
  r.regions = layout_.regions;
  r.epoch = epoch_;
  return r;
}

void write_ahead_log::check() {
  ctl_->check();
  error_record rec{};
  runtime::copy_to_host(&rec, errors_.get(), sizeof rec);
  if (rec.count == 0) return;
  runtime::memset_device(errors_.get(), 0, sizeof rec);
  const nvme::status st{rec.status};
  const std::string where = path() + ": region " + std::to_string(rec.source) + ": ";
  const bool misuse = st.type() == nvme::status_type::generic && rec.lba == 0;
  if (misuse && st.code() == nvme::sc::lba_out_of_range)
    throw log_error(where + "the region is full: an append needed " + std::to_string(rec.index) +
                        " bytes of its " + std::to_string(layout_.region_bytes) +
                        " (truncate more often or format larger regions)",
                    st, log_info(error_kind::no_space, path()));
  if (misuse && st.code() == nvme::sc::invalid_field)
    throw log_error(
        where + (rec.source >= layout_.regions
                     ? "no such device region (the log has " + std::to_string(layout_.regions) + ")"
                     : "an entry with " + std::to_string(rec.index) +
                           " payload bytes does not fit in a line of " +
                           std::to_string(layout_.line_size) + " bytes"),
        st, log_info(error_kind::invalid_argument, path()));
  if (rec.lba == 0)
    throw log_error(path() + ": FLUSH from a kernel failed: " + describe(st) + " (" +
                        std::to_string(rec.count) + " errors)",
                    st, log_info(kind_of(st), path()));
  throw log_error(where + (rec.kind == error_kind::deadline ? "deadline exceeded " : "") +
                      "writing line " + std::to_string(rec.index) + " at " + byte_text(rec.lba) +
                      " failed: " + describe(st) + " (" + std::to_string(rec.count) + " errors)",
                  st, [&] {
                    error_info i = log_info(rec.kind, path(), rec.lba);
                    i.index = rec.index;
                    i.count = rec.count;
                    return i;
                  }());
}

void write_ahead_log::flush() {
  check();
  block_mover(*ctl_).flush("flushing the log");
  check();
}

void write_ahead_log::host_append(const log_entry& e) {
  if (!recovered_) throw logic_error(path() + ": recover() the log before appending to it", path());
  const std::uint32_t L = layout_.line_size;
  if (e.payload_bytes + sizeof(entry_header) > L)
    throw invalid_argument(path() + ": an entry with " + std::to_string(e.payload_bytes) +
                               " payload bytes does not fit in a line of " + std::to_string(L),
                           path());
  const std::uint32_t bytes = detail::entry_bytes(e.payload_bytes);
  if (host_tail_ + bytes > layout_.region_bytes)
    throw log_error(path() + ": the host region is full (" + std::to_string(layout_.region_bytes) +
                        " bytes): truncate the log",
                    nvme::status::ok(), log_info(error_kind::no_space, path()));
  encode_host(host_line_.data() + host_tail_, epoch_, layout_.regions, host_tail_, e);
  const std::uint64_t first = host_tail_ / L, last = (host_tail_ + bytes - 1) / L;
  host_tail_ += bytes;
  const std::uint64_t region_lines = layout_.region_bytes / L;
  const std::uint64_t base_line = superblock_lines + std::uint64_t{layout_.regions} * region_lines;
  auto buf = runtime::make_device<std::byte>((last - first + 1) * L, false);
  runtime::copy_to_device(buf.get(), host_line_.data() + first * L, (last - first + 1) * L);
  block_mover(*ctl_).transfer(true,
                              line_requests(0, base_line + first, last - first + 1, L,
                                            ctl_->file().capacity_blocks()),
                              buf.get(), "writing the host region");
}

void write_ahead_log::commit(std::uint64_t txn) {
  log_entry c;
  c.kind = entry_kind::commit;
  c.txn = txn;
  host_append(c);
  flush();
}

void write_ahead_log::truncate() {
  if (!recovered_) throw logic_error(path() + ": recover() the log before truncating it", path());
  check();
  const std::uint32_t next = epoch_ + 1;
  write_superblock(next);
  block_mover(*ctl_).flush("truncating the log (epoch " + std::to_string(next) + ")");
  epoch_ = next;
  reset_tails();
}

std::vector<std::uint64_t> write_ahead_log::tails() const {
  std::vector<std::uint64_t> t(std::size_t{layout_.regions + 1} * 2);
  runtime::copy_to_host(t.data(), tails_.get(), t.size() * sizeof t[0]);
  std::vector<std::uint64_t> out(layout_.regions + 1);
  for (std::uint32_t r = 0; r < layout_.regions; ++r) out[r] = t[2 * r];
  out[layout_.regions] = host_tail_;
  return out;
}

}  // namespace warpstore::durable
