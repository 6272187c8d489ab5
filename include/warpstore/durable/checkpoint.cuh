// Checkpoints of GPU state to a file: device buffers and warpstore arrays
// registered in a group are written to storage together and committed
// atomically, so that a crash (kill -9) or a power cut at any instant leaves
// the last committed checkpoint intact and restorable.
//
//   warpstore::checkpoint_group g;
//   g.add(ranks, n * sizeof(double), "ranks").add(header, 64, "header");
//   g.open("/data/pagerank.ckpt", opts);        // sized, created if missing
//   if (g.restore().restored()) ...             // newest committed checkpoint, if any
//   g.checkpoint();                             // host form: returns when durable
//   kernel<<<...>>>(g.ref()); g.finish();       // device form: ref.checkpoint(warp, warps)
//
// All I/O goes through the controller's NVMe queues (io_ref::write / read /
// flush, one command at most one chunk = options::line_size bytes), on either
// target: the GPU, or the CPU target where std::threads play warps.
//
// File layout (byte offsets; every region a multiple of 4096 bytes, so the
// host controller may use O_DIRECT):
//
//   0        commit record of slot 0 (512 bytes: one NVMe block), zero to 4096
//   4096     commit record of slot 1
//   65536    slot 0: the buffers one after another, each padded with zeros to
//            a multiple of 4096 bytes (data_bytes in all)
//   65536 + S  slot 1, S = data_bytes rounded up to 64 KiB
//
// A commit record (checkpoint_record) carries a magic, its slot, a sequence
// number (1, 2, ...), the layout (buffer count and sizes, and their hash),
// data_bytes, a checksum of the slot's data_bytes bytes and a checksum of the
// record itself. The data checksum is the sum over every 8-byte word w at
// word position i of the slot of mix(w, i): order-free, so any number of
// warps compute it in parallel, the CPU target and the GPU alike, and any
// chunk size restores what any other wrote.
//
// Commit protocol (double buffering). The group knows the slot that does NOT
// hold the newest valid checkpoint (the inactive one) and the next sequence
// number (one more than any valid record's).
//   1. every warp writes its share of the chunks into the inactive slot and
//      adds the checksum of what it wrote to a device-scope accumulator;
//      each write has completed at the controller when the warp goes on;
//   2. each warp then arrives at a device-scope counter; the warp that
//      arrives last (no grid barrier, no cooperative launch: nobody waits for
//      anybody) issues FLUSH (everything written is durable), writes the
//      slot's commit record in one 512-byte block, and issues FLUSH again;
//   3. only then is the checkpoint committed: the next one goes to the other
//      slot.
// Every wait is bounded (options::timeout_ns); a failed or late command is
// recorded (checkpoint_fault) and the commit is not written.
//
// Restore reads both records and takes the newest one whose record checksum
// verifies, whose slot field is its own and whose layout is the group's; it
// reads that slot into the buffers, checking the data checksum, and falls back
// to the other record if the data does not verify (the host form does this by
// itself; the device form reports data_mismatch and the next restore skips
// that record). A file whose records are all zero or invalid is the "no
// checkpoint yet" state: restore() reports it (restore_result::empty) and
// touches no buffer.
//
// Why it is crash-safe. A checkpoint writes only the inactive slot and that
// slot's record; the active slot and its record are never written while they
// hold the newest valid checkpoint. So whatever a crash tears (any subset of
// the blocks written since the last FLUSH lost or kept, in any order), the
// newest committed checkpoint's record and data are untouched and still
// verify. A torn record fails its checksum (it is one block, which NVMe writes
// atomically, and the checksum catches anything else); a record that made it
// without its data (a device reordering writes across FLUSH, the memory
// controller writing its pinned pages back in any order, a lost block) fails
// the data checksum, and restore falls back to the other slot, the previous
// commit. A record is written only after FLUSH made its data durable, and
// checkpoint() returns only after the FLUSH that made the record durable, so
// an acknowledged checkpoint is never lost. Restore writes nothing to the
// file, so it is safe to interrupt and rerun.
//
// Rules for the device form: every warp numbered 0..warps-1 calls
// checkpoint(warp, warps) (or restore) exactly once per operation, with all 32
// lanes converged; the buffers must not change while a checkpoint reads them;
// one operation per group at a time: the next may start once every warp of
// the previous has returned (in a later kernel, say). The host learns the
// outcome with checkpoint_group::finish(). With the memory controller a
// device-side FLUSH only reaches pinned host memory: finish() (and the host
// forms) take the writes to the file.
#pragma once

#include "warpstore/durable/checkpoint/layout.cuh"  // file layout, checksums, shared types
#include "warpstore/durable/checkpoint/ref.cuh"     // checkpoint_ref: the device forms
#include "warpstore/durable/checkpoint/group.cuh"   // checkpoint_group: the host side
