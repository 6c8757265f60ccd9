/* A thread that holds the C library's exit-handler lock most of the time, as a thread of torch does for
   an instant when it first registers a static object's destructor. A child forked meanwhile inherits the
   lock held, by a thread it does not have: any exit-handler registration in the child then waits forever.

   __cxa_finalize(D) scans every registered exit handler, under that lock, for those of library D. Here no
   handler belongs to SCANNED, so none is called, and the scan is made long by first registering many
   handlers of another handle (NEVER_RUN, whose handlers run only at exit(), which the tests never call).
   The pause between scans lets a thread that waits for the lock have it. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

extern int __cxa_atexit(void (*function)(void *), void *argument, void *dso_handle);
extern void __cxa_finalize(void *dso_handle);

enum { REGISTERED = 50000 };
static char scanned, never_run;
static atomic_int holding;
static pthread_t holder;

static void nothing(void *argument) { (void)argument; }

static void *hold(void *unused) {
    const struct timespec pause = {0, 10000};
    (void)unused;
    while (atomic_load(&holding)) {
        __cxa_finalize(&scanned);
        nanosleep(&pause, 0);
    }
    return 0;
}

int start_holding(void) {
    for (int i = 0; i < REGISTERED; i++)
        __cxa_atexit(nothing, 0, &never_run);
    atomic_store(&holding, 1);
    return pthread_create(&holder, 0, hold, 0);
}

void stop_holding(void) {
    atomic_store(&holding, 0);
    pthread_join(holder, 0);
}
