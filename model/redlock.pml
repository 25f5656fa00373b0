/*
 * redlock.pml: the quorum lock of package redlock over three independent
 * masters and two clients, with the fence counter and the guarded store.
 * README.md maps each part to the Go function or Lua script it stands for;
 * docs/model.md states the assumptions and the properties.
 *
 * Time is discrete: one tick counter `now`, stopped at TMAX (the bound on
 * time). A key set at s with TTL ticks may vanish from s+TTL-DRIFT on (its
 * master's clock runs fast by the drift bound) and is gone at s+TTL. A
 * holder's lease is TTL-DRIFT from the start of its round (Client.lease).
 *
 * Switches (spin -D...):
 *   PAUSE       a holder may pause for any time between its validity check and
 *               its write (no timing assumption); without it no holder's work
 *               outlives its lease
 *   SUSPEND     each client's machine may be suspended once, for SUSP ticks,
 *               outside its work: its monotonic clock misses them
 *   RESTART     one master may restart, once, empty (no persistence)
 *   EXTEND      a holder extends its lock once after its write (Lock.Extend)
 *   INFLIGHT    a SET NX may get no reply in time and reach its master later
 *   EXACT_CLOCKS masters' clocks do not drift (smaller checks of other parts)
 *   NO_MUTEX    leave out the assertion of (a), to check (b) alone
 *   UNGUARDED   the store takes every write: (b)'s assertion must then fail
 *   NO_REFUSAL  assert that the store never refuses a write: with PAUSE, the
 *               counterexample is Kleppmann's scenario, the stale write refused
 *   BUG_*       re-injected bugs, see README.md
 *
 * Each step that the code's trace records is printed as an "EV" line
 * (printf runs in simulation and trail replay, never in pan's search):
 * model/check.go's Checker encodes the same rules, and model_test.go replays
 * SPIN's simulations and counterexamples through it.
 */

#define NM 3            /* masters; assertions below are written for three */
#define NC 2            /* clients; and for two */
#define Q 2             /* quorum.Majority(3) */
#ifndef CYCLES
#define CYCLES 2        /* acquisitions per client */
#endif
#define TTL 3
#define DRIFT 1         /* clockdrift.Allowance(TTL), in ticks */
#define LEASE 2         /* Client.lease(TTL) = TTL - DRIFT */
#ifndef TMAX
#define TMAX 6
#endif
#define SUSP 3

byte now;
byte key[NM];           /* the token the key holds, 0: none */
byte exp[NM];           /* when it is gone for sure */
bool inCS[NC];          /* writing under the lock */
byte dl[NC];            /* the holder's lease deadline (boot clock) */
byte ctr;               /* the fence counter (fence.pml models its lost key) */
byte stored;            /* the fence stored with the guarded value */
byte accepted;          /* ghost: the highest fence the store accepted */
bool refused;           /* ghost: the store refused a write */
#ifdef INFLIGHT
bit  pend[NC*NM];       /* a SET NX of client c to master m still in flight */
byte ptok[NC*NM];
#define returned(c, m) (pend[(c)*NM+(m)] == 0)
#else
#define returned(c, m) true
#endif
#ifdef SUSPEND
byte susp[NC];          /* ticks client c's monotonic clock missed */
#endif
#ifdef RESTART
byte quar[NM];          /* master m restarted: its votes count again from then */
bit  restarts;          /* one restart in all */
#endif

/* Redis's expiry: at a tick, keys whose time ran out are gone. */
#define gone(m) if :: key[m] != 0 && exp[m] <= now -> key[m] = 0; exp[m] = 0 :: else fi
#ifdef RESTART
#define unquar(m) if :: quar[m] != 0 && quar[m] <= now -> quar[m] = 0 :: else fi
#else
#define unquar(m) skip
#endif
inline tick(n) {
	now = now + n; gone(0); gone(1); gone(2); unquar(0); unquar(1); unquar(2)
}

#ifdef PAUSE
#define inTime(n) true
#else
/* the timing assumption: no holder's work outlives its lease */
#define inTime(n) (!(inCS[0] && now+n >= dl[0]) && !(inCS[1] && now+n >= dl[1]))
#endif

/* SET ... PX TTL on master m: the key lives TTL ticks of the master's clock,
 * which may run fast by the drift bound. */
inline setKey(m, t) {
	key[m] = t;
#ifdef EXACT_CLOCKS
	exp[m] = now + TTL
#else
	if
	:: exp[m] = now + TTL
	:: exp[m] = now + TTL - DRIFT
	fi
#endif
}

#ifdef INFLIGHT
/* A SET NX of client c that got no reply in time reaches master m now, or
 * never. */
inline late(c, m) {
	if
	:: key[m] == 0 -> setKey(m, ptok[c*NM+m]);
		printf("EV set at=%d c=%d m=%d tok=%d ok=1\n", now, c, m, ptok[c*NM+m])
	:: true
	fi;
	pend[c*NM+m] = 0; ptok[c*NM+m] = 0
}
#endif

/* The world around the clients, in one process: the clock, suspends of a
 * client's machine, a SET NX that reaches its master after its round ended,
 * a master that restarts empty. */
active proctype Env() {
end:	do
	:: d_step { now < TMAX && inTime(1) -> tick(1) }
#ifdef SUSPEND
	:: d_step { now+SUSP <= TMAX && susp[0] == 0 && !inCS[0] && inTime(SUSP) -> tick(SUSP); susp[0] = SUSP }
	:: d_step { now+SUSP <= TMAX && susp[1] == 0 && !inCS[1] && inTime(SUSP) -> tick(SUSP); susp[1] = SUSP }
#endif
#ifdef INFLIGHT
	:: atomic { pend[0] -> late(0, 0) }
	:: atomic { pend[1] -> late(0, 1) }
	:: atomic { pend[2] -> late(0, 2) }
	:: atomic { pend[3] -> late(1, 0) }
	:: atomic { pend[4] -> late(1, 1) }
	:: atomic { pend[5] -> late(1, 2) }
#endif
#ifdef RESTART
	:: d_step { !restarts && now > 0 -> key[0] = 0; exp[0] = 0; quar[0] = now + TTL; restarts = 1; printf("EV restart at=%d m=0\n", now) }
	:: d_step { !restarts && now > 0 -> key[1] = 0; exp[1] = 0; quar[1] = now + TTL; restarts = 1; printf("EV restart at=%d m=1\n", now) }
	:: d_step { !restarts && now > 0 -> key[2] = 0; exp[2] = 0; quar[2] = now + TTL; restarts = 1; printf("EV restart at=%d m=2\n", now) }
#endif
	od
}

/* The restart guard (redlock/internal/watch): the vote of a master that
 * restarted less than a TTL ago does not count; it may have lost a key. */
#if defined(RESTART) && !defined(BUG_NO_RESTART_GUARD)
#define counts(m) (quar[m] == 0)
#else
#define counts(m) true
#endif

/* Lock.over: the lease ends on the monotonic clock and on the clock that
 * counts suspend, whichever ends it first. */
#ifdef SUSPEND
#define mono(c) (now - susp[c])
#ifdef BUG_MONOTONIC_LEASE_ONLY
#define valid(c) (mono(c) < dlm)
#else
#define valid(c) (now < dl[c] && mono(c) < dlm)
#endif
#else
#define mono(c) now
#define valid(c) (now < dl[c])
#endif

#define noKey(t) (key[0] != t && key[1] != t && key[2] != t)

/* (e): once the releases are done, no master keeps the key. */
#define checkReleased() printf("EV released at=%d c=%d tok=%d\n", now, c, tok); assert(noKey(tok))
#define released() atomic { checkReleased() }

/* Lock.releaseAfter and release.lua: compare-and-delete on every master, each
 * after its call of the round returned (quorum.Round.UndoUntil); a release
 * that got no reply is tried again (cleanup.go). Then (e): no master keeps
 * the key. */
#define relOne(m) if \
	:: key[m] == tok -> key[m] = 0; exp[m] = 0; printf("EV release at=%d c=%d m=%d tok=%d ok=1\n", now, c, m, tok) \
	:: else -> printf("EV release at=%d c=%d m=%d tok=%d ok=0\n", now, c, m, tok) \
	fi
inline releaseAll() {
#ifdef INFLIGHT
	m = 0;
	do
	:: m < NM ->
		returned(c, m);
		if
		:: d_step { key[m] == tok -> key[m] = 0; exp[m] = 0; printf("EV release at=%d c=%d m=%d tok=%d ok=1\n", now, c, m, tok); m++ }
		:: d_step { key[m] != tok -> printf("EV release at=%d c=%d m=%d tok=%d ok=0\n", now, c, m, tok); m++ }
		:: skip ->                       /* no reply: lost on the way */
#ifdef BUG_NO_RELEASE_RETRY
			m++                          /* not tried again */
#else
			skip                         /* tried again */
#endif
		fi
	:: else -> break
	od;
	released()
#else
	/* every release arrives (INFLIGHT checks those that do not) */
	d_step { relOne(0); relOne(1); relOne(2); checkReleased() }
#endif
}

/* (e) where a bug sends no release: once the round's calls returned, no
 * master may keep the key. */
inline noRelease() {
	returned(c, 0); returned(c, 1); returned(c, 2);
	released()
}

/* The holder starts its work: (a), no other client is at work. */
#ifdef NO_MUTEX
#define enter() inCS[c] = true
#else
#define enter() inCS[c] = true; assert(!inCS[1-c])
#endif
#define entered() printf("EV enter at=%d mono=%d c=%d tok=%d\n", now, mono(c), c, tok)

/* The holder's look at its lock before its work: Lock.Context (or Until).
 * BUG_DONE_LATE_AFTER_LEASE: Context asked for the first time after the
 * lease ran out arms a timer instead of ending the lock, and the holder
 * finds it open. */
#ifdef BUG_DONE_LATE_AFTER_LEASE
#define held(c) (valid(c) || !asked)
#define ask() asked = 1
#else
#define held(c) valid(c)
#define ask() skip
#endif

/* Lock.extended: a majority extended, and the lease it extends has not run
 * out. BUG_EXTEND_OUTCOME_ON_DONE: the old lease is compared only when Done
 * had been asked for (never, here): the new one alone decides. */
#ifdef BUG_EXTEND_OUTCOME_ON_DONE
#define extOK(c) (now < start + LEASE && mono(c) < mstart + LEASE)
#else
#define extOK(c) valid(c)
#endif

proctype Client(byte c) {
	byte a, m, i, tok, got, dlm, fence;
#ifdef BUG_DONE_LATE_AFTER_LEASE
	bit asked;
#endif
#ifdef EXTEND
	byte start, mstart;
	bit extended;
#endif
#ifdef BUG_CLEANUP_ON_CALLER_CTX
	bool ended;
#endif
	do
	:: a < CYCLES ->
		/* lockRound: SET NX on every master, client c in the order c, c+1, ... */
		d_step { tok = c*CYCLES + a + 1; dl[c] = now + LEASE; dlm = mono(c) + LEASE;
			printf("EV round at=%d mono=%d c=%d tok=%d\n", now, mono(c), c, tok) }
		do
		:: i < NM ->
			if
			:: atomic {                  /* answered in time */
				m = (c + i) % NM;
				if
				:: key[m] == 0 -> setKey(m, tok); if :: counts(m) -> got++ :: else fi;
					printf("EV set at=%d c=%d m=%d tok=%d ok=1\n", now, c, m, tok);
					printf("EV setreply at=%d c=%d m=%d tok=%d ok=1\n", now, c, m, tok)
				:: else ->               /* held: refused */
					printf("EV set at=%d c=%d m=%d tok=%d ok=0\n", now, c, m, tok);
					printf("EV setreply at=%d c=%d m=%d tok=%d ok=0\n", now, c, m, tok)
				fi; i++ }
#ifdef INFLIGHT
			:: d_step { m = (c + i) % NM; pend[c*NM+m] = 1; ptok[c*NM+m] = tok; i++ }  /* no reply in time */
#endif
			fi
		:: else -> break
		od;
#ifdef BUG_CLEANUP_ON_CALLER_CTX
		if :: ended = true :: skip fi;   /* the caller's context ended meanwhile */
#endif
#ifdef BUG_LEASE_FROM_ROUND_END
		atomic { dl[c] = now + LEASE; dlm = mono(c) + LEASE };
#endif
#ifdef BUG_DRIFT_ADDED
		atomic { dl[c] = dl[c] + 2*DRIFT; dlm = dlm + 2*DRIFT };
#endif
		if
		:: atomic { got >= Q && valid(c) -> ctr++; fence = ctr; got = 0;  /* won; Client.mint */
			printf("EV mintreply at=%d c=%d fence=%d\n", now, c, fence);
			printf("EV won at=%d mono=%d c=%d tok=%d until=%d fence=%d\n", now, mono(c), c, tok, dlm, fence) };
#ifdef EXTEND
work:
#endif
			if
#ifdef PAUSE
			:: atomic { held(c) -> ask(); entered() }  /* checked, then paused for any time */
#else
			:: atomic { held(c) -> ask(); entered(); enter() }
#endif
			:: else -> releaseAll(); goto next  /* the lease ran out first: Unlock */
			fi;
#ifdef PAUSE
			enter();
#endif
			d_step {                         /* guardset.lua: a Newer fence only */
#ifndef UNGUARDED
				if
				:: fence > stored ->
#endif
					printf("EV write at=%d c=%d tok=%d fence=%d ok=1\n", now, c, tok, fence);
					assert(fence > accepted);  /* (b): never below an accepted fence */
					accepted = fence; stored = fence
#ifndef UNGUARDED
				:: else -> refused = true;
					printf("EV write at=%d c=%d tok=%d fence=%d ok=0\n", now, c, tok, fence)
				fi
#endif
				;
				inCS[c] = false
			};
#ifdef NO_REFUSAL
			assert(!refused);
#endif
#ifdef EXTEND
			if
			:: !extended ->
				/* Lock.Extend: extend.lua on every master. The restart guard
				 * holds out no vote here (Client.vote guards acquisitions):
				 * extend.lua extends only a key that holds the token, which a
				 * restarted master has only if this lock set it since. */
				d_step { extended = 1; start = now; mstart = mono(c); got = 0; i = 0;
					printf("EV extround at=%d mono=%d c=%d tok=%d\n", now, mono(c), c, tok) }
				do
				:: i < NM ->
					if
					:: atomic { key[i] == tok -> setKey(i, tok); got++;  /* every master counts (below) */
						printf("EV extend at=%d c=%d m=%d tok=%d ok=1\n", now, c, i, tok);
						printf("EV extreply at=%d c=%d m=%d tok=%d ok=1\n", now, c, i, tok); i++ }
					:: d_step { key[i] != tok ->
						printf("EV extend at=%d c=%d m=%d tok=%d ok=0\n", now, c, i, tok);
						printf("EV extreply at=%d c=%d m=%d tok=%d ok=0\n", now, c, i, tok); i++ }
#ifdef INFLIGHT
					:: atomic { key[i] == tok -> setKey(i, tok);  /* applied, no reply */
						printf("EV extend at=%d c=%d m=%d tok=%d ok=1\n", now, c, i, tok); i++ }
#endif
					:: i++                   /* no reply */
					fi
				:: else -> break
				od;
				if
				:: d_step { got >= Q && extOK(c) ->
						assert(valid(c));        /* (f): a lease that ran out is never extended */
						dl[c] = start + LEASE; dlm = mstart + LEASE; got = 0; i = 0;
						printf("EV extended at=%d mono=%d c=%d tok=%d until=%d\n", now, mono(c), c, tok, dlm) };
					goto work
				:: else ->                   /* a failed Extend ends the lock: released */
#ifdef BUG_EXTEND_KEEPS_KEYS
					noRelease(); goto next
#else
					skip
#endif
				fi
			:: else
			fi;
#endif
			releaseAll()                     /* Unlock */
		:: else ->
			/* a lost attempt: abandon, on a context the caller's does not reach */
#ifdef BUG_CLEANUP_ON_CALLER_CTX
			if
			:: ended -> noRelease()
			:: else -> releaseAll()
			fi
#else
			releaseAll()
#endif
		fi;
next:	skip;
		d_step {
			a++; m = 0; i = 0; got = 0; dlm = 0; fence = 0; dl[c] = 0;
#ifdef BUG_DONE_LATE_AFTER_LEASE
			asked = 0;
#endif
#ifdef EXTEND
			start = 0; mstart = 0; extended = 0;
#endif
#ifdef BUG_CLEANUP_ON_CALLER_CTX
			ended = false;
#endif
		}
	:: else -> break
	od
}

init {
	atomic {
		run Client(0); run Client(1)
	}
}
