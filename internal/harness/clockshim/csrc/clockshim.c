/*
 * clockshim: an LD_PRELOAD library that shifts the wall clock of the process it is loaded into.
 *
 * It overrides gettimeofday, time and clock_gettime (CLOCK_REALTIME and CLOCK_REALTIME_COARSE
 * only; every other clock passes through unchanged). The shift is read from a 32-byte state file
 * that the test writes (package quorumlock.dev/internal/clockshim), named by the environment
 * variable CLOCKSHIM_STATE and mapped shared and read-only on first use, so that a change made
 * by the test is seen by the next clock read, without a signal or a restart.
 *
 * No dlsym, no malloc, no stdio: libfaketime deadlocks Debian's redis-server at start because
 * jemalloc and libfaketime each call into the other while initialising. The real clocks are
 * read with raw syscalls, which need neither the next symbol nor the vDSO; the cost is a real
 * syscall per clock read, where libc would use the vDSO.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/select.h> /* struct timeval; <sys/time.h> would declare gettimeofday, whose
                           prototype differs across glibc versions. */
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/*
 * The state file, written by the Go side under a sequence lock: seq is odd while an update is
 * under way. The fake clock is real + offset, where
 *     offset = base + drift * (real - t0)
 * and drift is rate - 1 as IEEE-754 bits, so that a file of zeros is a clock with no shift.
 * Keep in step with type state in clockshim.go.
 */
struct state {
	uint64_t seq;
	int64_t base;  /* ns */
	int64_t t0;    /* ns of the real CLOCK_REALTIME */
	uint64_t drift;
};

/* What mapped holds when there is no state (variable unset, file missing or short). */
#define NO_STATE ((const struct state *)1)

static const struct state *mapped; /* 0: not looked up yet */

static const struct state *load(void) {
	const struct state *s = __atomic_load_n(&mapped, __ATOMIC_ACQUIRE);
	if (s)
		return s == NO_STATE ? 0 : s;

	const struct state *m = NO_STATE;
	const char *path = getenv("CLOCKSHIM_STATE");
	if (path && *path) {
		long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			/* A mapping past the end of the file would be SIGBUS on read. */
			long size = syscall(SYS_lseek, fd, 0L, SEEK_END);
			if (size >= (long)sizeof(struct state)) {
				long p = syscall(SYS_mmap, 0L, sizeof(struct state), PROT_READ, MAP_SHARED, fd, 0L);
				if (p != -1)
					m = (const struct state *)p;
			}
			syscall(SYS_close, fd);
		}
	}

	/* Threads that raced here keep the first mapping; the others give theirs back. */
	const struct state *none = 0;
	if (!__atomic_compare_exchange_n(&mapped, &none, m, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		if (m != NO_STATE)
			syscall(SYS_munmap, m, sizeof(struct state));
		m = none;
	}
	return m == NO_STATE ? 0 : m;
}

static int64_t add_sat(int64_t a, int64_t b) {
	int64_t r;
	if (__builtin_add_overflow(a, b, &r))
		return b > 0 ? INT64_MAX : INT64_MIN;
	return r;
}

/* shifted returns real + offset, real being ns of the real CLOCK_REALTIME. */
static int64_t shifted(int64_t real) {
	const struct state *s = load();
	if (!s)
		return real;
	int64_t base = 0, t0 = 0;
	uint64_t bits = 0;
	/* A writer that stays mid-update this long has died or been stopped; its half-written
	   values are then better than a server that hangs in a clock read. */
	for (int try = 0; try < 1000; try++) {
		uint64_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
		base = __atomic_load_n(&s->base, __ATOMIC_RELAXED);
		t0 = __atomic_load_n(&s->t0, __ATOMIC_RELAXED);
		bits = __atomic_load_n(&s->drift, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (!(seq & 1) && __atomic_load_n(&s->seq, __ATOMIC_RELAXED) == seq)
			break;
		syscall(SYS_sched_yield);
	}
	double drift;
	memcpy(&drift, &bits, sizeof drift);
	int64_t offset = base;
	if (drift != 0) {
		double extra = drift * (double)(real - t0);
		if (extra >= 0x1p63)
			offset = INT64_MAX;
		else if (extra <= -0x1p63)
			offset = INT64_MIN;
		else
			offset = add_sat(base, (int64_t)extra);
	}
	return add_sat(real, offset);
}

static void split(int64_t ns, int64_t unit, int64_t *sec, int64_t *frac) {
	*sec = ns / 1000000000;
	*frac = ns % 1000000000;
	if (*frac < 0) {
		*sec -= 1;
		*frac += 1000000000;
	}
	*frac /= unit;
}

static int realtime(clockid_t clk, int64_t *ns) {
	struct timespec ts;
	if (syscall(SYS_clock_gettime, clk, &ts) != 0)
		return -1;
	*ns = shifted((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec);
	return 0;
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
	if (clk != CLOCK_REALTIME && clk != CLOCK_REALTIME_COARSE)
		return (int)syscall(SYS_clock_gettime, clk, ts);
	int64_t ns, sec, frac;
	if (realtime(clk, &ns) != 0)
		return -1;
	split(ns, 1, &sec, &frac);
	ts->tv_sec = (time_t)sec;
	ts->tv_nsec = (long)frac;
	return 0;
}

/* tz is obsolete; glibc zeroes it when given, and so do we. */
int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
	int64_t ns, sec, frac;
	if (realtime(CLOCK_REALTIME, &ns) != 0)
		return -1;
	if (tv) {
		split(ns, 1000, &sec, &frac);
		tv->tv_sec = (time_t)sec;
		tv->tv_usec = (suseconds_t)frac;
	}
	if (tz)
		memset(tz, 0, 2 * sizeof(int));
	return 0;
}

time_t time(time_t *out) {
	int64_t ns, sec, frac;
	if (realtime(CLOCK_REALTIME, &ns) != 0)
		return (time_t)-1;
	split(ns, 1, &sec, &frac);
	if (out)
		*out = (time_t)sec;
	return (time_t)sec;
}
