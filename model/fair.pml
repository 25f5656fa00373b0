/*
 * fair.pml: the fair wait policy (redlock/internal/fair) on one resource.
 * Client X has two Lock calls: X1 holds the lock, X2 waits in-process behind
 * it (package fair's Line; no entry on the masters yet). Client Y has one, Y1,
 * queued on the masters with a claim. The quorum is abstracted here to one
 * key (what a majority holds; redlock.pml checks the quorum itself), whose TTL
 * runs on the world's clock.
 *
 * Unlock (fair.Policy.Unlock): a lock that ended before its Unlock is released
 * as usual and X2 tries in a round of its own; otherwise, with lease left
 * (passable), it passes in-process to X2 (passOn). release_key (queue.lua)
 * hands a released key to the queue's head: to its claim's token
 * (hand_to_head). fair_lock.lua takes a free key only for the queue's head.
 *
 * Properties: (a) one holder at work at a time (assertion); queue order: a key
 * handed or taken goes to the queue's head (assertion); (d) under weak
 * fairness, once X1 has unlocked, a waiter gets to work (ltl live, pan -a -f).
 * X1's lock may end before its Unlock and before its lease runs out: a failed
 * Extend ends it and releases its key.
 * BUG_PASS_LOST: Unlock passes on a lock that had ended.
 *
 * CLAIM: X2 also queues on the masters behind Y1, with a claim, while it
 * waits in-process (fair.Line.Claims). A waiter that claimed is never passed
 * the lock in-process: its claim would stay on the masters, and a release
 * would hand the key to a waiter that no longer waits. Whether X2 claims and
 * whether Unlock may pass to it are decided under the line's mutex; the
 * assertion: a key handed to X2's claim finds X2 still waiting on the masters.
 * BUG_CLAIM_RACE: X2 decides to claim and writes its claim in two steps,
 * outside the mutex, so Unlock can pick it for a pass in between.
 */

#define TTL 3
#define LEASE 2
#ifndef TMAX
#define TMAX 6
#endif
#define T1 1            /* X1's token, which X2 takes with an in-process pass */
#define T2 2            /* X2's own attempt */
#define T3 3            /* Y1's claim */

byte now;
byte key = T1;          /* X1 won at 0 */
byte exp = TTL;
byte head;              /* the masters' queue: Y1 (3) queued; X2 (2) behind, once it queues */
byte second;
bool cs[4];             /* at work, by waiter: 1 X1, 2 X2, 3 Y1 */
byte dl[4];             /* leases */
bool unlocked;          /* X1 has unlocked */
bool served;            /* ghost: a waiter (X2 or Y1) got to work */
bool lost;              /* X1's lock ended before its lease: a failed Extend */
chan pass = [1] of { byte };  /* the in-process pass: X1's lease deadline */
bool claimed;           /* X2 has a claim on the masters */
bool passedIn;          /* ghost: X2 took an in-process pass: it no longer waits on the masters */

#define inTime (!(cs[1] && now+1 >= dl[1]) && !(cs[2] && now+1 >= dl[2]) && !(cs[3] && now+1 >= dl[3]))

active proctype Clock() {
end:	do
	:: d_step { now < TMAX && inTime -> now++; if :: key != 0 && exp <= now -> key = 0; exp = 0 :: else fi }
	/* X1's lock ends before its Unlock and its lease: a failed Extend
	 * (Lock.lose, then its keys released) */
	:: d_step { key == T1 && !lost && !cs[1] && !unlocked -> key = 0; exp = 0; lost = true }
	od
}

/* the holder starts its work (a) */
#define enter(w) cs[w] = true; assert(cs[1] + cs[2] + cs[3] == 1); served = served || w != 1

/* release_key(key, token): compare-and-delete, or the key to the head's claim */
inline releaseKey(t) {
	atomic {                               /* one script */
	if
	:: key == t && head == 3 -> key = T3; exp = now + TTL; head = second; second = 0  /* hand_to_head */
	:: key == t && head == 2 -> key = T2; exp = now + TTL; head = second; second = 0;
		assert(!passedIn)  /* the claim of a waiter that still waits */
	:: key == t && head == 0 -> key = 0; exp = 0
	:: else
	fi
	}
}

active proctype X1() {
	dl[1] = LEASE;
	if
	:: atomic { now < dl[1] && !lost -> enter(1) }
	:: else
	fi;
	cs[1] = false;
	/* Unlock */
	if
#ifdef BUG_PASS_LOST
	:: atomic { now < dl[1] && !claimed -> pass!dl[1]; unlocked = true }            /* passes what ended */
#else
	:: atomic { now < dl[1] && !lost && !claimed -> pass!dl[1]; unlocked = true }   /* passOn */
#endif
	:: else -> atomic { releaseKey(T1); pass!0; unlocked = true }       /* release, X2 tries */
	fi
}

active proctype X2() {
	byte d;
#ifdef CLAIM
	if
#ifdef BUG_CLAIM_RACE
	:: !unlocked ->                        /* decides to claim; Unlock may pick it meanwhile */
		atomic { head == 3 && second == 0 -> second = 2; claimed = true }
#else
	:: atomic { !unlocked && head == 3 && second == 0 -> second = 2; claimed = true }
#endif
	:: skip
	fi;
#endif
	pass?d;
	if
	:: d != 0 ->                           /* passed in-process: X1's token and lease */
		atomic { passedIn = true; dl[2] = d; if :: now < dl[2] -> enter(2) :: else fi }
	:: else ->                             /* a round of its own: fair_lock.lua */
		byte start;
		do
		:: atomic {
			if
			:: key == 0 && head == 0 -> key = T2; exp = now + TTL; dl[2] = now + LEASE; break
			:: key == 0 && head == 2 -> key = T2; exp = now + TTL; head = second; second = 0; dl[2] = now + LEASE; break
			:: key == T2 -> dl[2] = start + LEASE; break      /* handed to our claim */
			:: else -> start = now;                           /* queue, claim */
				if :: head == 0 -> head = 2 :: head == 3 && second == 0 -> second = 2 :: else fi
			fi }
		od;
		atomic { if :: now < dl[2] -> enter(2) :: else fi }
	fi;
	cs[2] = false;
	releaseKey(T1); releaseKey(T2)
}

active proctype Y1() {
	byte start;
	head = 3;                              /* queued behind X1, with a claim */
	do
	:: atomic {
		if
		:: key == T3 -> dl[3] = start + LEASE; break       /* handed: the claim's attempt began at start */
		:: key == 0 && head == 3 -> key = T3; exp = now + TTL; head = second; second = 0; dl[3] = now + LEASE; break
		:: else -> start = now                             /* refreshes its entry and claim */
		fi }
	od;
	atomic { if :: now < dl[3] -> enter(3) :: else fi };
	cs[3] = false;
	releaseKey(T3)
}

#ifdef LIVE
ltl live { [] (unlocked -> <> served) }
#endif
