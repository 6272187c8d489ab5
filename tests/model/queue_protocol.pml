/* The submission/completion protocol of include/warpstore/queue.cuh and the
 * host controller (src/controller/host_controller.cpp), as a Spin model.
 *
 * NLANES lanes each run NCMDS commands through one queue pair of depth D:
 * ticket (atomic add) -> wait for the slot's turn and for SQ room (helping
 * move the tail and retire completions meanwhile) -> write the entry and its
 * mark -> wait for the completion (helping) -> release the slot's turn.
 * The tail mover advances over consecutive marks and rings the SQ doorbell;
 * the retirer reads CQ entries by phase, hands each status to its slot by
 * command id, follows the SQ head the controller reports and rings the CQ
 * head doorbell. The controller fetches up to D commands, completes them in
 * any order (reordered completions), and posts only while the CQ has room.
 *
 * Checked: every command is executed exactly once and its lane sees its own
 * completion (no lost or doubled command, no completion for an idle slot),
 * and every lane finishes (no deadlock: a wait whose helpers can do nothing
 * blocks, and Spin reports a blocked lane as an invalid end state).
 * Spin's interleavings are sequentially consistent: memory ordering is
 * covered by ThreadSanitizer and the perturbed-atomics test instead.
 *
 *   spin -a -DD=2 -DNLANES=2 -DNCMDS=2 queue_protocol.pml && cc -O2 -o pan pan.c && ./pan
 */
#ifndef D
#define D 2
#endif
#ifndef NLANES
#define NLANES 2
#endif
#ifndef NCMDS
#define NCMDS 2
#endif
#define TOTAL (NLANES * NCMDS)
/* The phase a CQ entry carries in pass (seq / D): 1 on even passes. */
#define EXPECT(seq) (((seq) / D) % 2 == 0)

/* GPU-private protocol state (sequences, not indices). */
byte ticket, tail, cq_head, gsq_head;
bit tail_lock, cq_lock;
byte marks[D];        /* ticket+1 of the entry written into the slot */
byte turns[D];        /* times the slot was released */
bit completions[D];   /* 0 while in flight */
byte protocol_errors;
/* Host-visible: SQ entries (the ticket stands for the command), doorbells, CQ. */
byte sq_ticket[D];
byte sq_db, cq_db;
byte cq_cid[D], cq_sqhd[D];
bit cq_phase[D];
/* Bookkeeping for the properties. */
byte executed[TOTAL];
byte finished;

/* Tail lock holder: advance over every consecutive marked entry, ring once. */
inline move_tail_body() {
  mt = tail;
  do
  :: (mt - tail < D && marks[mt % D] == mt + 1) -> mt++
  :: else -> break
  od;
  if
  :: mt != tail -> tail = mt; sq_db = mt % D
  :: else -> skip
  fi;
  tail_lock = 0
}

/* CQ lock holder: retire every new completion in order. */
inline retire_body() {
  rh = cq_head;
  rs = gsq_head;
  do
  :: cq_phase[rh % D] == EXPECT(rh) ->
     rc = cq_cid[rh % D];
     rd = cq_sqhd[rh % D];
     rt = tail;              /* read after the entry: its head is at most this */
     atomic {
       if
       :: completions[rc] == 0 -> completions[rc] = 1
       :: else -> protocol_errors++
       fi
     };
     ra = (rd + D - rs % D) % D;
     if
     :: rs + ra <= rt -> rs = rs + ra
     :: else -> skip
     fi;
     rh++
  :: else -> break
  od;
  if
  :: rh != cq_head -> cq_head = rh; gsq_head = rs; cq_db = rh % D
  :: else -> skip
  fi;
  cq_lock = 0
}

/* The helpers a waiting lane runs, each only when it can make progress: when
 * none can, the lane blocks (a real one would spin to its deadline). */
#define CAN_MOVE_TAIL (tail_lock == 0 && marks[tail % D] == tail + 1)
#define CAN_RETIRE (cq_lock == 0 && cq_phase[cq_head % D] == EXPECT(cq_head))

proctype lane() {
  byte k, t, slot, turn, mt, rh, rs, rc, rd, rt, ra;
  for (k : 1 .. NCMDS) {
    atomic { t = ticket; ticket++ };
    slot = t % D;
    turn = t / D;
    /* submit: the slot's turn, and at most D-1 entries between head and tail */
    do
    :: (turns[slot] == turn && t < gsq_head + D - 1) -> break
    :: atomic { t >= gsq_head + D - 1 && CAN_MOVE_TAIL -> tail_lock = 1 }; move_tail_body()
    :: atomic { t >= gsq_head + D - 1 && CAN_RETIRE -> cq_lock = 1 }; retire_body()
    od;
    completions[slot] = 0;
    sq_ticket[slot] = t;
    marks[slot] = t + 1;
    /* wait: for the completion, helping meanwhile */
    do
    :: completions[slot] != 0 -> break
    :: atomic { tail <= t && CAN_MOVE_TAIL -> tail_lock = 1 }; move_tail_body()
    :: atomic { CAN_RETIRE -> cq_lock = 1 }; retire_body()
    od;
    assert(executed[t] == 1);  /* the completion is for a command that ran, once */
    turns[slot] = turn + 1
  };
  atomic { finished++ }
}

/* The controller: fetch while contexts are free, post in any order while the
 * CQ has room (one entry always stays empty). */
active proctype controller() {
  byte head, cqt, npend, i, pick, e;
  bit phase = 1;
  byte pend_cid[D];
end:
  do
  :: atomic { head != sq_db && npend < D ->
       e = sq_ticket[head];
       executed[e]++;
       assert(executed[e] == 1);
       pend_cid[npend] = head;  /* the cid is the slot */
       npend++;
       head = (head + 1) % D }
  :: (npend > 0 && (cqt + D - cq_db) % D < D - 1) ->
     /* pick any pending completion: reordered completions */
     pick = 0;
     do
     :: pick < npend - 1 -> pick++
     :: break
     od;
     cq_sqhd[cqt] = head;
     atomic { cq_cid[cqt] = pend_cid[pick]; cq_phase[cqt] = phase };  /* dword 3 last */
     atomic {
       i = pick;
       do
       :: i < npend - 1 -> pend_cid[i] = pend_cid[i + 1]; i++
       :: else -> break
       od;
       npend--;
       cqt = (cqt + 1) % D;
       if
       :: cqt == 0 -> phase = 1 - phase
       :: else -> skip
       fi
     }
  od
}

init {
  byte n;
  atomic { for (n : 1 .. NLANES) { run lane() } };
  finished == NLANES;
  assert(protocol_errors == 0);
  for (n : 0 .. TOTAL - 1) { assert(executed[n] == 1) }
}
