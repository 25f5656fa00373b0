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
 *
 * Each step that the code's trace records is printed as an "EV" line (printf
 * runs in simulation and trail replay, never in pan's search), in the terms
 * of model/check.go and fair.go: clients X (c=0: waiters 1 and 2) and Y (c=1:
 * waiter 3), one master (m=0), tokens 1 (X1's), 2 (X2's attempts), 3 (Y1's
 * claim), no fence (fence=0). Y1 is queued at 0 (stamp 0), X2 behind it.
 * Nothing runs before X1 has printed its win and Y1's entry (started).
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
byte head = 3;          /* the masters' queue: Y1 (3) queued at 0; X2 (2) behind, once it queues */
byte second;
bool cs[4];             /* at work, by waiter: 1 X1, 2 X2, 3 Y1 */
byte dl[4];             /* leases */
bool unlocked;          /* X1 has unlocked */
bool served;            /* ghost: a waiter (X2 or Y1) got to work */
bool lost;              /* X1's lock ended before its lease: a failed Extend */
chan pass = [1] of { byte };  /* the in-process pass: X1's lease deadline */
bool claimed;           /* X2 has a claim on the masters */
bool passedIn;          /* ghost: X2 took an in-process pass: it no longer waits on the masters */

#define started (dl[1] != 0)   /* X1 printed its win */

#define inTime (!(cs[1] && now+1 >= dl[1]) && !(cs[2] && now+1 >= dl[2]) && !(cs[3] && now+1 >= dl[3]))

active proctype Clock() {
end:	do
	:: d_step { started && now < TMAX && inTime -> now++; if :: key != 0 && exp <= now -> key = 0; exp = 0 :: else fi }
	/* X1's lock ends before its Unlock and its lease: a failed Extend
	 * (Lock.lose, then its keys released) */
	:: d_step { started && key == T1 && !lost && !cs[1] && !unlocked -> key = 0; exp = 0; lost = true;
		printf("EV ended at=%d c=0 tok=1\n", now); printf("EV release at=%d c=0 m=0 tok=1 ok=1\n", now) }
	od
}

/* the holder starts its work (a) */
#define enter(w) cs[w] = true; assert(cs[1] + cs[2] + cs[3] == 1); served = served || w != 1

/* the steps of a waiter's win on the master: its round, fair_lock.lua, the reply */
#define printTake(c, t, st) printf("EV round at=%d mono=%d c=%d tok=%d\n", now, now, c, t); \
	printf("EV set at=%d c=%d m=0 tok=%d w=%d stamp=%d claim=1 ok=1\n", now, c, t, t, st); \
	printf("EV setreply at=%d c=%d m=0 tok=%d ok=1\n", now, c, t)
/* ... and of an attempt that queues (or refreshes) its entry, with a claim */
#define printQueue(c, t, st) printf("EV round at=%d mono=%d c=%d tok=%d\n", now, now, c, t); \
	printf("EV set at=%d c=%d m=0 tok=%d w=%d stamp=%d claim=1 ok=0\n", now, c, t, t, st)
/* the holder's Unlock ends its work */
#define printUnlock(c, t) printf("EV unlock at=%d mono=%d c=%d tok=%d\n", now, now, c, t)
#define printWon(c, t, u) printf("EV won at=%d mono=%d c=%d tok=%d until=%d fence=0\n", now, now, c, t, u); \
	printf("EV enter at=%d mono=%d c=%d tok=%d\n", now, now, c, t)
#define X2STAMP (now*10+5)

/* release_key(key, token), by client c: compare-and-delete, or the key to the head's claim */
inline releaseKey(c, t) {
	atomic {                               /* one script */
	if
	:: key == t && head == 3 -> printf("EV hand at=%d c=%d m=0 from=%d w=3 tok=3 ok=0\n", now, c, t);
		key = T3; exp = now + TTL; head = second; second = 0  /* hand_to_head */
	:: key == t && head == 2 -> printf("EV hand at=%d c=%d m=0 from=%d w=2 tok=2 ok=0\n", now, c, t);
		key = T2; exp = now + TTL; head = second; second = 0;
		assert(!passedIn)  /* the claim of a waiter that still waits */
	:: key == t && head == 0 -> printf("EV release at=%d c=%d m=0 tok=%d ok=1\n", now, c, t); key = 0; exp = 0
	:: else -> printf("EV release at=%d c=%d m=0 tok=%d ok=0\n", now, c, t)
	fi
	}
}

active proctype X1() {
	d_step {
		printTake(0, T1, 0); printf("EV won at=0 mono=0 c=0 tok=1 until=%d fence=0\n", LEASE);
		printQueue(1, T3, 0);                  /* Y1 queued behind, with a claim */
		dl[1] = LEASE
	}
	if
	:: atomic { now < dl[1] && !lost -> enter(1); printf("EV enter at=%d mono=%d c=0 tok=1\n", now, now) }
	:: else
	fi;
	d_step { cs[1] = false; printUnlock(0, T1) };
	/* Unlock */
	if
#ifdef BUG_PASS_LOST
	:: atomic { now < dl[1] && !claimed -> pass!dl[1]; unlocked = true;              /* passes what ended */
		printf("EV pass at=%d mono=%d c=0 tok=1 w=2\n", now, now) }
#else
	:: atomic { now < dl[1] && !lost && !claimed -> pass!dl[1]; unlocked = true;     /* passOn */
		printf("EV pass at=%d mono=%d c=0 tok=1 w=2\n", now, now) }
#endif
	:: else -> atomic { releaseKey(0, T1); pass!0; unlocked = true }       /* release, X2 tries */
	fi
}

active proctype X2() {
	byte d;
#ifdef CLAIM
	if
#ifdef BUG_CLAIM_RACE
	:: started && !unlocked ->             /* decides to claim; Unlock may pick it meanwhile */
		atomic { head == 3 && second == 0 -> second = 2; claimed = true; printQueue(0, T2, X2STAMP) }
#else
	:: atomic { started && !unlocked && head == 3 && second == 0 -> second = 2; claimed = true; printQueue(0, T2, X2STAMP) }
#endif
	:: skip
	fi;
#endif
	pass?d;
	if
	:: d != 0 ->                           /* passed in-process: X1's token and lease */
		atomic { passedIn = true; dl[2] = d; if :: now < dl[2] -> enter(2); printWon(0, T1, d) :: else fi }
	:: else ->                             /* a round of its own: fair_lock.lua */
		byte start;
		do
		:: atomic {
			if
			:: key == 0 && head == 0 -> key = T2; exp = now + TTL; dl[2] = now + LEASE; printTake(0, T2, X2STAMP); break
			:: key == 0 && head == 2 -> key = T2; exp = now + TTL; head = second; second = 0; dl[2] = now + LEASE;
				printTake(0, T2, X2STAMP); break
			:: key == T2 -> dl[2] = start + LEASE;            /* handed to our claim */
				printf("EV setreply at=%d c=0 m=0 tok=2 ok=1\n", now); break
			:: else -> start = now; printQueue(0, T2, X2STAMP);  /* queue, claim */
				if :: head == 0 -> head = 2 :: head == 3 && second == 0 -> second = 2 :: else fi
			fi }
		od;
		atomic { if :: now < dl[2] -> enter(2); printWon(0, T2, dl[2]) :: else fi }
	fi;
	d_step { if :: cs[2] && passedIn -> printUnlock(0, T1) :: cs[2] && !passedIn -> printUnlock(0, T2) :: else fi; cs[2] = false };
	releaseKey(0, T1); releaseKey(0, T2)
}

active proctype Y1() {
	byte start;
	started;                               /* queued behind X1 at 0, with a claim */
	do
	:: atomic {
		if
		:: key == T3 -> dl[3] = start + LEASE;             /* handed: the claim's attempt began at start */
			printf("EV setreply at=%d c=1 m=0 tok=3 ok=1\n", now); break
		:: key == 0 && head == 3 -> key = T3; exp = now + TTL; head = second; second = 0; dl[3] = now + LEASE;
			printTake(1, T3, 0); break
		:: else -> start = now; printQueue(1, T3, 0)      /* refreshes its entry and claim */
		fi }
	od;
	atomic { if :: now < dl[3] -> enter(3); printWon(1, T3, dl[3]) :: else fi };
	d_step { if :: cs[3] -> printUnlock(1, T3) :: else fi; cs[3] = false };
	releaseKey(1, T3)
}

#ifdef LIVE
ltl live { [] (unlocked -> <> served) }
#endif
