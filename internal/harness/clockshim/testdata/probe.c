/* probe prints, on one line, what each clock the shim overrides says, next to the real
 * clocks read with raw syscalls, which the shim cannot see:
 *   raw_realtime_ns time_s gettimeofday_us realtime_ns realtime_coarse_ns
 *   raw_monotonic_ns monotonic_ns
 */
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long ns(struct timespec ts) { return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec; }

int main(void) {
	struct timespec raw, real, coarse, rawmono, mono;
	struct timeval tv;
	syscall(SYS_clock_gettime, CLOCK_REALTIME, &raw);
	time_t t = time(NULL);
	if (gettimeofday(&tv, NULL) != 0 || clock_gettime(CLOCK_REALTIME, &real) != 0 ||
	    clock_gettime(CLOCK_REALTIME_COARSE, &coarse) != 0)
		return 1;
	syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &rawmono);
	if (clock_gettime(CLOCK_MONOTONIC, &mono) != 0)
		return 1;
	printf("%lld %lld %lld %lld %lld %lld %lld\n", ns(raw), (long long)t,
	       (long long)tv.tv_sec * 1000000LL + tv.tv_usec, ns(real), ns(coarse), ns(rawmono), ns(mono));
	return 0;
}
