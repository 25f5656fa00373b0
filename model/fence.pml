/*
 * fence.pml: the fence counter of fence.RedisCounter (fence/scripts/mint.lua)
 * shared by two processes, on a node that may lose the key (a restart without
 * persistence, an eviction) at any moment, up to LOSSES times.
 *
 * mint.lua: INCR; a key that was missing is set to the node's clock (the
 * floor), in µs. The precondition (docs/fencing.md): the node's clock gains at
 * least one µs per mint of the key, modelled as one mint per clock value.
 * RedisCounter.Mint: each process remembers the highest fence it minted and
 * refuses a reply at or below it (ErrCounterRegressed).
 *
 * (c): no fence is returned twice, across processes and losses.
 * BUG_COUNTER_WITHOUT_FLOOR: a missing key starts at 1 (bugs.CounterWithoutFloor).
 * The "EV" lines are the steps model/check.go's Checker replays (redlock.pml).
 */

#ifndef MINTS
#define MINTS 3         /* per process */
#endif
#ifndef LOSSES
#define LOSSES 2
#endif
#define CMAX 8          /* the node's clock stops here */

byte cnt;               /* fence:<resource> on the node, 0: missing */
byte clk = 1;           /* the node's clock, in µs */
byte lastClk;           /* the clock at the last mint */
byte losses;
bit  issued[CMAX+2*MINTS+2];  /* ghost: fences returned to a caller */

active proctype Node() {
end:	do
	:: d_step { clk < CMAX -> clk++ }
	:: d_step { cnt != 0 && losses < LOSSES -> cnt = 0; losses++; printf("EV lost at=%d\n", clk) }  /* key lost */
	od
}

proctype Process() {
	byte n, v, last;
end:	do        /* a process waiting for the clock when it stopped ends there */
	:: d_step {     /* mint.lua, one script: atomic on the node */
			n < MINTS && clk > lastClk ->  /* at most one mint per µs of the node's clock */
			lastClk = clk;
			if
			:: cnt != 0 -> cnt++
#ifdef BUG_COUNTER_WITHOUT_FLOOR
			:: else -> cnt = 1
#else
			:: else -> cnt = clk
#endif
			fi;
			v = cnt;
			printf("EV mint at=%d c=%d fence=%d clock=%d\n", clk, _pid, v, clk);
			printf("EV mintreply at=%d c=%d fence=%d\n", clk, _pid, v)
		};
		if
		:: v <= last -> skip               /* ErrCounterRegressed: no fence */
		:: else ->
			d_step { assert(!issued[v]); issued[v] = 1; last = v }  /* (c) */
		fi;
		d_step { n++; v = 0 }
	:: else -> break
	od
}

init {
	atomic { run Process(); run Process() }
}
