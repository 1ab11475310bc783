/* The event hook from C: a denial, a provider rejection and breaker
 * changes reach the callback as JSON with its userdata; the hook can be
 * replaced and removed, removal waits for a call under way on another
 * thread, it cannot be changed from inside the callback, and freeing the
 * governor removes it. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

#define SECOND 1000000000ull

static const char *CONFIG =
    "[adaptive.breaker]\n"
    "failures = 2\n"
    "pauses = [\"10s\"]\n"
    "[scopes.\"openai/org\"]\n"
    "provider = true\n"
    "limits = [{ dimension = \"tokens\", amount = 600, window = \"1m\" }]\n";

/* What the callback saw: each event's JSON, copied. */
typedef struct {
    pthread_mutex_t lock;
    char *events[16];
    int n;
    int bad_length; /* a len that was not strlen(event_json) */
} seen;

static void record(void *userdata, const char *json, size_t len) {
    seen *s = userdata;
    pthread_mutex_lock(&s->lock);
    if (strlen(json) != len) s->bad_length++;
    if (s->n < 16) {
        char *copy = malloc(len + 1);
        memcpy(copy, json, len + 1);
        s->events[s->n++] = copy;
    }
    pthread_mutex_unlock(&s->lock);
}

static void forget(seen *s) {
    for (int i = 0; i < s->n; i++) free(s->events[i]);
    s->n = 0;
}

typedef struct {
    llmgov_manual_clock *clock;
    const llmgov_governor *gov;
    llmgov_request request;
} fixture;

static fixture setup(void) {
    fixture f = {llmgov_manual_clock_new(0), NULL, {0}};
    CHECK_OK(llmgov_governor_from_toml(CONFIG, f.clock, &f.gov));
    const char *path = "openai/org";
    CHECK_OK(llmgov_governor_route(f.gov, &path, 1, &f.request.route));
    return f;
}

static void teardown(fixture *f) {
    llmgov_governor_free(f->gov);
    llmgov_manual_clock_free(f->clock);
}

static void denials_rejections_and_breaker_changes_reach_the_callback(void) {
    fixture f = setup();
    seen s = {PTHREAD_MUTEX_INITIALIZER, {0}, 0, 0};
    CHECK_OK(llmgov_governor_set_event_hook(f.gov, record, &s));
    f.request.input_tokens = 500;
    llmgov_permit *permit = NULL, *refused = NULL;
    CHECK_OK(llmgov_governor_try_acquire(f.gov, &f.request, &permit));
    CHECK(s.n == 0); /* admissions are no events */
    llmgov_request batch = f.request;
    batch.input_tokens = 200;
    CHECK_OK(llmgov_governor_class(f.gov, "batch", &batch.class_id));
    CHECK_RESULT(llmgov_governor_try_acquire(f.gov, &batch, &refused), LLMGOV_RESULT_RATE_LIMITED);
    /* The refusal's own error is what llmgov_last_error says after it. */
    CHECK_STR(last_error().code, "rate_limited");

    static const char body[] = "{\"error\":{\"type\":\"tokens\",\"code\":\"rate_limit_exceeded\"}}";
    llmgov_header retry = {(const uint8_t *)"retry-after", 11, (const uint8_t *)"1", 1};
    llmgov_classification c;
    CHECK_OK(llmgov_permit_report(permit, 429, &retry, 1, (const uint8_t *)body, sizeof body - 1, &c));
    CHECK_OK(llmgov_permit_report(permit, 503, &retry, 1, NULL, 0, &c));
    CHECK_OK(llmgov_manual_clock_advance(f.clock, 10 * SECOND));
    llmgov_permit *probe = NULL;
    f.request.input_tokens = 1;
    CHECK_OK(llmgov_governor_try_acquire(f.gov, &f.request, &probe));
    CHECK_OK(llmgov_permit_report(probe, 200, NULL, 0, (const uint8_t *)"{}", 2, &c));

    CHECK(s.n == 5);
    CHECK(s.bad_length == 0);
    if (s.n == 5) {
        CHECK_STR(s.events[0],
                  "{\"event\":\"denied\",\"code\":\"rate_limited\",\"scope\":\"openai/org\",\"dimension\":\"tokens\","
                  "\"retry_after_ms\":10000,\"class\":\"batch\"}");
        CHECK_STR(s.events[1],
                  "{\"event\":\"provider_rejected\",\"scopes\":[\"openai/org\"],\"kind\":\"rate_limited\","
                  "\"dimension\":\"tokens\",\"retry_after_ms\":1000}");
        CHECK_CONTAINS(s.events[2], "\"kind\":\"overloaded\"");
        CHECK_STR(s.events[3], "{\"event\":\"breaker_changed\",\"scope\":\"openai/org\",\"state\":\"open\"}");
        CHECK_STR(s.events[4], "{\"event\":\"breaker_changed\",\"scope\":\"openai/org\",\"state\":\"closed\"}");
    }
    forget(&s);

    /* Removed: events go nowhere. */
    CHECK_OK(llmgov_governor_set_event_hook(f.gov, NULL, NULL));
    CHECK_RESULT(llmgov_governor_try_acquire(f.gov, &batch, &refused), LLMGOV_RESULT_RATE_LIMITED);
    CHECK(s.n == 0);
    /* Removing twice is fine. */
    CHECK_OK(llmgov_governor_set_event_hook(f.gov, NULL, NULL));

    /* Replaced: the new userdata gets them. */
    seen t = {PTHREAD_MUTEX_INITIALIZER, {0}, 0, 0};
    CHECK_OK(llmgov_governor_set_event_hook(f.gov, record, &s));
    CHECK_OK(llmgov_governor_set_event_hook(f.gov, record, &t));
    CHECK_RESULT(llmgov_governor_try_acquire(f.gov, &batch, &refused), LLMGOV_RESULT_RATE_LIMITED);
    CHECK(s.n == 0 && t.n == 1);
    forget(&t);

    llmgov_permit_free(permit);
    llmgov_permit_free(probe);
    teardown(&f);
}

/* A callback that calls back into llmgov: its own refusal is an event
 * too (nested), and changing the hook from inside is refused. */
typedef struct {
    const llmgov_governor *gov;
    llmgov_request request;
    int calls;
    llmgov_result set_inside;
    const char *field;
} reentrant;

static void call_back_in(void *userdata, const char *json, size_t len) {
    (void)json;
    (void)len;
    reentrant *r = userdata;
    if (r->calls++ > 0) return;
    llmgov_permit *p = NULL;
    /* Refused again: a nested event, delivered on this thread. */
    (void)llmgov_governor_try_acquire(r->gov, &r->request, &p);
    r->set_inside = llmgov_governor_set_event_hook(r->gov, NULL, NULL);
    llmgov_error e;
    if (llmgov_last_error(&e) == LLMGOV_RESULT_OK && same(e.field, "callback")) r->field = "callback";
}

static void the_hook_cannot_be_changed_from_inside_the_callback(void) {
    fixture f = setup();
    f.request.input_tokens = 600;
    llmgov_permit *all = NULL, *p = NULL;
    CHECK_OK(llmgov_governor_try_acquire(f.gov, &f.request, &all));
    reentrant r = {f.gov, f.request, 0, LLMGOV_RESULT_OK, NULL};
    CHECK_OK(llmgov_governor_set_event_hook(f.gov, call_back_in, &r));
    CHECK_RESULT(llmgov_governor_try_acquire(f.gov, &f.request, &p), LLMGOV_RESULT_RATE_LIMITED);
    CHECK(r.calls == 2);
    CHECK(r.set_inside == LLMGOV_RESULT_INVALID_ARGUMENT);
    CHECK_STR(r.field, "callback");
    /* Still set: the outer refusal after it is seen too. */
    CHECK_RESULT(llmgov_governor_try_acquire(f.gov, &f.request, &p), LLMGOV_RESULT_RATE_LIMITED);
    CHECK(r.calls == 3);
    llmgov_permit_free(all);
    teardown(&f);
}

/* A callback that blocks until released, to hold a call under way. */
typedef struct {
    atomic_int entered, release, returned;
    atomic_int unsetting, unset_saw_returned, unset_done;
    const llmgov_governor *gov;
    llmgov_request request;
} blocking;

static void block_until_released(void *userdata, const char *json, size_t len) {
    (void)json;
    (void)len;
    blocking *b = userdata;
    atomic_store(&b->entered, 1);
    while (!atomic_load(&b->release)) sched_yield();
    atomic_store(&b->returned, 1);
}

static void *refuse_once(void *arg) {
    blocking *b = arg;
    llmgov_permit *p = NULL;
    (void)llmgov_governor_try_acquire(b->gov, &b->request, &p);
    return NULL;
}

static void *unset(void *arg) {
    blocking *b = arg;
    atomic_store(&b->unsetting, 1);
    llmgov_result r = llmgov_governor_set_event_hook(b->gov, NULL, NULL);
    atomic_store(&b->unset_saw_returned, atomic_load(&b->returned));
    atomic_store(&b->unset_done, r == LLMGOV_RESULT_OK ? 1 : -1);
    return NULL;
}

static void removal_waits_for_a_call_under_way(void) {
    fixture f = setup();
    f.request.input_tokens = 600;
    llmgov_permit *all = NULL;
    CHECK_OK(llmgov_governor_try_acquire(f.gov, &f.request, &all));
    blocking b = {0};
    b.gov = f.gov;
    b.request = f.request;
    CHECK_OK(llmgov_governor_set_event_hook(f.gov, block_until_released, &b));
    pthread_t refuser, unsetter;
    pthread_create(&refuser, NULL, refuse_once, &b);
    while (!atomic_load(&b.entered)) sched_yield();
    pthread_create(&unsetter, NULL, unset, &b);
    while (!atomic_load(&b.unsetting)) sched_yield();
    /* Give the unsetter every chance to return early if it did not wait. */
    for (int i = 0; i < 2000 && !atomic_load(&b.unset_done); i++) sched_yield();
    CHECK(atomic_load(&b.unset_done) == 0);
    atomic_store(&b.release, 1);
    pthread_join(refuser, NULL);
    pthread_join(unsetter, NULL);
    CHECK(atomic_load(&b.unset_done) == 1);
    CHECK(atomic_load(&b.unset_saw_returned) == 1);
    llmgov_permit_free(all);
    teardown(&f);
}

/* Freeing the governor removes the hook: a permit that outlives it can
 * still be reported on, and the callback is not called. */
static void freeing_the_governor_removes_the_hook(void) {
    fixture f = setup();
    seen s = {PTHREAD_MUTEX_INITIALIZER, {0}, 0, 0};
    CHECK_OK(llmgov_governor_set_event_hook(f.gov, record, &s));
    llmgov_permit *permit = NULL;
    CHECK_OK(llmgov_governor_try_acquire(f.gov, &f.request, &permit));
    teardown(&f);
    llmgov_classification c;
    CHECK_OK(llmgov_permit_report(permit, 503, NULL, 0, NULL, 0, &c));
    CHECK_OK(llmgov_permit_report(permit, 503, NULL, 0, NULL, 0, &c)); /* opens the breaker */
    CHECK(s.n == 0);
    llmgov_permit_free(permit);
}

/* What a callback frees from inside itself: the governor, and a permit
 * that holds it too (the caller has let go of its own references). */
typedef struct {
    const llmgov_governor *gov;
    llmgov_permit *permit;
    int calls;
} freeing;

static void free_everything(void *userdata, const char *json, size_t len) {
    (void)json;
    (void)len;
    freeing *f = userdata;
    if (f->calls++ > 0) return;
    llmgov_governor_free(f->gov);
    llmgov_permit_free(f->permit);
}

/* The docs allow freeing the governor from inside its callback. The
 * llmgov call that raised the event still runs on it (and on the permit a
 * report is about), so they go when that call returns, not under it:
 * valgrind fails the test on any touch of freed memory. */
static void freeing_from_inside_the_callback_waits_for_the_call_that_raised_the_event(void) {
    llmgov_permit *p = NULL;
    /* A denial in try_acquire, and a request that never fits, refused at
     * the call of a blocking acquire. */
    for (int blocking_call = 0; blocking_call < 2; blocking_call++) {
        fixture f = setup();
        f.request.input_tokens = 600;
        freeing fr = {f.gov, NULL, 0};
        CHECK_OK(llmgov_governor_try_acquire(f.gov, &f.request, &fr.permit));
        CHECK_OK(llmgov_governor_set_event_hook(f.gov, free_everything, &fr));
        if (blocking_call) {
            f.request.input_tokens = 601;
            CHECK_RESULT(llmgov_governor_acquire(f.gov, &f.request, 0, &p), LLMGOV_RESULT_NEVER_FITS);
        } else {
            CHECK_RESULT(llmgov_governor_try_acquire(f.gov, &f.request, &p), LLMGOV_RESULT_RATE_LIMITED);
        }
        CHECK(fr.calls == 1);
        CHECK_STR(last_error().scope, "openai/org");
        llmgov_manual_clock_free(f.clock);
    }
    /* A provider's 429, reported on the very permit the callback frees. */
    fixture f = setup();
    freeing fr = {f.gov, NULL, 0};
    CHECK_OK(llmgov_governor_try_acquire(f.gov, &f.request, &fr.permit));
    CHECK_OK(llmgov_governor_set_event_hook(f.gov, free_everything, &fr));
    llmgov_classification c;
    CHECK_OK(llmgov_permit_report(fr.permit, 429, NULL, 0, NULL, 0, &c));
    CHECK(fr.calls == 1);
    CHECK(c.limited);
    llmgov_manual_clock_free(f.clock);
}

/* Freeing another governor from inside a callback waits, as from anywhere
 * else, for that governor's callbacks under way on other threads: only a
 * governor's own callback cannot be waited for. */
typedef struct {
    blocking *other;
    const llmgov_governor *other_gov;
    int saw_returned;
} freeing_other;

static void free_the_other(void *userdata, const char *json, size_t len) {
    (void)json;
    (void)len;
    freeing_other *o = userdata;
    while (!atomic_load(&o->other->entered)) sched_yield();
    atomic_store(&o->other->release, 1);
    llmgov_governor_free(o->other_gov);
    o->saw_returned = atomic_load(&o->other->returned);
}

static void freeing_another_governor_inside_a_callback_waits_for_its_calls(void) {
    fixture mine = setup(), theirs = setup();
    mine.request.input_tokens = theirs.request.input_tokens = 600;
    llmgov_permit *my_all = NULL, *their_all = NULL, *p = NULL;
    CHECK_OK(llmgov_governor_try_acquire(mine.gov, &mine.request, &my_all));
    CHECK_OK(llmgov_governor_try_acquire(theirs.gov, &theirs.request, &their_all));
    blocking b = {0};
    b.gov = theirs.gov;
    b.request = theirs.request;
    CHECK_OK(llmgov_governor_set_event_hook(theirs.gov, block_until_released, &b));
    freeing_other o = {&b, theirs.gov, -1};
    CHECK_OK(llmgov_governor_set_event_hook(mine.gov, free_the_other, &o));
    pthread_t refuser;
    pthread_create(&refuser, NULL, refuse_once, &b); /* inside their callback until released */
    CHECK_RESULT(llmgov_governor_try_acquire(mine.gov, &mine.request, &p), LLMGOV_RESULT_RATE_LIMITED);
    pthread_join(refuser, NULL);
    CHECK(o.saw_returned == 1);
    llmgov_permit_free(their_all);
    llmgov_manual_clock_free(theirs.clock);
    llmgov_permit_free(my_all);
    teardown(&mine);
}

/* Threads refuse requests without pause while the main thread replaces
 * the hook again and again, freeing each userdata as soon as the
 * replacement returns: a call that outlived its removal would touch freed
 * memory (AddressSanitizer and valgrind would fail the test). */
typedef struct {
    atomic_long calls;
} counter;

static void count(void *userdata, const char *json, size_t len) {
    (void)json;
    (void)len;
    atomic_fetch_add(&((counter *)userdata)->calls, 1);
}

typedef struct {
    const llmgov_governor *gov;
    llmgov_request request;
    atomic_int stop;
} hammer;

static void *refuse_until_stopped(void *arg) {
    hammer *h = arg;
    while (!atomic_load(&h->stop)) {
        llmgov_permit *p = NULL;
        if (llmgov_governor_try_acquire(h->gov, &h->request, &p) == LLMGOV_RESULT_OK) llmgov_permit_free(p);
    }
    return NULL;
}

static void replacing_the_hook_under_load_frees_nothing_in_use(void) {
    fixture f = setup();
    f.request.input_tokens = 600;
    llmgov_permit *all = NULL;
    CHECK_OK(llmgov_governor_try_acquire(f.gov, &f.request, &all));
    hammer h = {f.gov, f.request, 0};
    pthread_t threads[3];
    for (int i = 0; i < 3; i++) pthread_create(&threads[i], NULL, refuse_until_stopped, &h);
    long total = 0;
    counter *current = NULL;
    for (int round = 0; round < 40; round++) {
        counter *next = malloc(sizeof *next);
        atomic_init(&next->calls, 0);
        CHECK_OK(llmgov_governor_set_event_hook(f.gov, count, next));
        if (current != NULL) {
            total += atomic_load(&current->calls);
            free(current); /* no call of it is under way, nor will be */
        }
        current = next;
        while (atomic_load(&next->calls) == 0) sched_yield(); /* in use before it is replaced */
    }
    CHECK_OK(llmgov_governor_set_event_hook(f.gov, NULL, NULL));
    total += atomic_load(&current->calls);
    free(current);
    atomic_store(&h.stop, 1);
    for (int i = 0; i < 3; i++) pthread_join(threads[i], NULL);
    CHECK(total >= 40);
    llmgov_permit_free(all);
    teardown(&f);
}

static void bad_input_names_the_argument(void) {
    seen s = {PTHREAD_MUTEX_INITIALIZER, {0}, 0, 0};
    CHECK_RESULT(llmgov_governor_set_event_hook(NULL, record, &s), LLMGOV_RESULT_NULL_ARGUMENT);
    llmgov_error e = last_error();
    CHECK_STR(e.field, "governor");
    CHECK_CONTAINS(e.message, "governor");
}

int main(void) {
    denials_rejections_and_breaker_changes_reach_the_callback();
    the_hook_cannot_be_changed_from_inside_the_callback();
    removal_waits_for_a_call_under_way();
    freeing_the_governor_removes_the_hook();
    replacing_the_hook_under_load_frees_nothing_in_use();
    freeing_from_inside_the_callback_waits_for_the_call_that_raised_the_event();
    freeing_another_governor_inside_a_callback_waits_for_its_calls();
    bad_input_names_the_argument();
    return finish("events");
}
