package redistest

// clockShimSource is the clock shim (see clock.go), compiled by the test
// that starts a server with Options.ShimClock. It is C, kept in a Go
// string: a package without cgo may not hold a .c file.
const clockShimSource = `/*
 * clockshim.c: an LD_PRELOAD library that moves a process's wall clock
 * (CLOCK_REALTIME, CLOCK_REALTIME_COARSE, gettimeofday, time) by what a
 * file says; monotonic clocks are untouched. redistest compiles it with
 * "cc -shared -fPIC" and starts redis-server under it (clock.go).
 *
 * The file, named by DLOCK_CLOCK_FILE, holds one line:
 *   o <microseconds>   the real clock plus this offset (may be negative)
 *   f <microseconds>   frozen at this Unix time
 * A missing or unreadable file means the real clock. The file is read
 * again at most every RELOAD_NS of the monotonic clock, so a change is
 * seen within that.
 *
 * It must work before anything is initialised: redis-server's allocator
 * reads the clock before main (libfaketime aborts it there). So it
 * allocates nothing, reads the file with open/read on a stack buffer, and
 * finds the real clock_gettime lazily with dlsym(RTLD_NEXT); while that
 * is under way (dlsym may allocate, and the allocator may read the clock)
 * it asks the kernel directly.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define RELOAD_NS 1000000LL /* 1 ms */

typedef int (*clock_fn)(clockid_t, struct timespec *);

static clock_fn real_clock;  /* the next clock_gettime, once found */
static int resolve_state;    /* 0 not yet, 1 under way, 2 done */
static int64_t setting;      /* (value << 1) | frozen */
static int64_t next_load_ns; /* monotonic ns of the next read of the file */

static int raw_clock(clockid_t id, struct timespec *ts) {
	clock_fn f = __atomic_load_n(&real_clock, __ATOMIC_ACQUIRE);
	if (f)
		return f(id, ts);
	int expected = 0;
	if (__atomic_compare_exchange_n(&resolve_state, &expected, 1, 0,
	                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		f = (clock_fn)dlsym(RTLD_NEXT, "clock_gettime");
		if (f) {
			__atomic_store_n(&real_clock, f, __ATOMIC_RELEASE);
			__atomic_store_n(&resolve_state, 2, __ATOMIC_RELEASE);
			return f(id, ts);
		}
		__atomic_store_n(&resolve_state, 0, __ATOMIC_RELEASE);
	}
	return (int)syscall(SYS_clock_gettime, id, ts);
}

static int64_t parse(const char *p, const char *end, int *ok) {
	int neg = 0;
	int64_t v = 0;
	*ok = 0;
	while (p < end && *p == ' ')
		p++;
	if (p < end && *p == '-') {
		neg = 1;
		p++;
	}
	while (p < end && *p >= '0' && *p <= '9') {
		v = v * 10 + (*p - '0');
		p++;
		*ok = 1;
	}
	return neg ? -v : v;
}

/* load reads the file into setting (the real clock when it is absent). */
static void load(void) {
	const char *path = getenv("DLOCK_CLOCK_FILE");
	int64_t s = 0;
	if (path) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			char buf[64];
			ssize_t n = read(fd, buf, sizeof buf);
			close(fd);
			if (n > 2 && (buf[0] == 'o' || buf[0] == 'f')) {
				int ok;
				int64_t v = parse(buf + 1, buf + n, &ok);
				if (ok)
					s = (v << 1) | (buf[0] == 'f');
			}
		}
	}
	__atomic_store_n(&setting, s, __ATOMIC_RELEASE);
}

/* now_us is the shimmed wall clock in microseconds, and the real one in
 * *real. */
static int64_t now_us(const struct timespec *real) {
	struct timespec m;
	if (raw_clock(CLOCK_MONOTONIC, &m) == 0) {
		int64_t mono = (int64_t)m.tv_sec * 1000000000LL + m.tv_nsec;
		if (mono >= __atomic_load_n(&next_load_ns, __ATOMIC_ACQUIRE)) {
			__atomic_store_n(&next_load_ns, mono + RELOAD_NS, __ATOMIC_RELEASE);
			load();
		}
	}
	int64_t s = __atomic_load_n(&setting, __ATOMIC_ACQUIRE);
	int64_t v = s >> 1; /* arithmetic shift keeps the sign */
	if (s & 1)
		return v;
	return (int64_t)real->tv_sec * 1000000 + real->tv_nsec / 1000 + v;
}

static int shimmed(clockid_t id) {
	return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	int r = raw_clock(id, ts);
	if (r != 0 || !shimmed(id))
		return r;
	/* keep the real nanoseconds' tail, unless frozen */
	int64_t subus = ts->tv_nsec % 1000;
	int64_t us = now_us(ts);
	if (__atomic_load_n(&setting, __ATOMIC_ACQUIRE) & 1)
		subus = 0;
	ts->tv_sec = us / 1000000;
	ts->tv_nsec = (us % 1000000) * 1000 + subus;
	if (ts->tv_nsec < 0) {
		ts->tv_sec--;
		ts->tv_nsec += 1000000000;
	}
	return 0;
}

int gettimeofday(struct timeval *tv, void *tz) {
	struct timespec ts;
	(void)tz;
	if (raw_clock(CLOCK_REALTIME, &ts) != 0)
		return -1;
	if (tv) {
		int64_t us = now_us(&ts);
		tv->tv_sec = us / 1000000;
		tv->tv_usec = us % 1000000;
		if (tv->tv_usec < 0) {
			tv->tv_sec--;
			tv->tv_usec += 1000000;
		}
	}
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	if (raw_clock(CLOCK_REALTIME, &ts) != 0)
		return (time_t)-1;
	int64_t us = now_us(&ts);
	time_t s = (time_t)(us / 1000000);
	if (us < 0 && us % 1000000)
		s--;
	if (t)
		*t = s;
	return s;
}
`
