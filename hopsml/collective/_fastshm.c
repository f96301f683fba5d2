/* The small same-host exchange of hopsml.collective, compiled: publish this rank's header and payload in its
 * slot of the host segment, wait for every other rank's (brief polling, then a futex sleep), reduce in rank
 * order and return, without going back to Python between the steps.
 *
 * The layout of the small area is host.py's (`small_area_bytes`): per member one cache line (a 32-bit counter,
 * the futex word, and a count of its sleepers), then per member two halves (double buffering: round k writes
 * half k & 1) of HALF_BYTES: 8 bytes of lengths, the packed header at HEADER_AT, the payload at
 * align64(HEADER_AT + header length). A rank writes round k's half only after it saw every rank's counter reach
 * k - 1, and a rank raises its counter to k - 1 only after it read round k - 2's slots: so no slot is written
 * while someone still reads it, and each round needs one wait.
 *
 * Every wait keeps the collective's rules: the timeout (no progress for timeout_s is an error naming the rank
 * waited for), the segment's closed word (a rank that aborts writes its rank + 1 there), and the peers' control
 * connections (readable once a peer aborted, closed or died). Linux only (futex).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <linux/futex.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LINE 64
#define HEADER_AT 64
#define HEADER_CAP 4096
#define PAYLOAD_CAP (64 << 10)
#define HALF_BYTES (HEADER_AT + HEADER_CAP + PAYLOAD_CAP)
#define SEQ_AT 12 /* protocol.Header: the sequence number's offset in a packed header (big-endian u64) */
#define SPIN_NS 200000LL /* poll this long (yielding the core) before sleeping, as shm.SPIN_S */
#define FIRST_SLICE_NS 1000000LL
#define SLICE_NS 50000000LL
#define MAX_MEMBERS 256

enum { ST_REDUCED = 0, ST_EXCHANGED = 1, ST_INELIGIBLE = 2, ST_CLOSED = -1, ST_SIGNALLED = -2, ST_TIMEOUT = -3 };

typedef struct {
    PyObject_HEAD
    Py_buffer segment;
    int held;
    char *small;          /* the small area */
    volatile uint64_t *closed;
    int index, n;
    int fds[MAX_MEMBERS];
    long long timeout_ns;
    uint32_t round;
    int who;              /* the member (or, for ST_CLOSED, the global rank) a failed wait names */
    int profile;
    long long calls, copy_ns, wait_ns, reduce_ns;
    long long peers_ns;   /* when the last round's wait ended (CLOCK_MONOTONIC, as Python's perf_counter_ns) */
} Group;

static inline long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline uint32_t *counter_of(Group *g, int i) { return (uint32_t *)(g->small + (size_t)i * LINE); }
static inline uint32_t *sleepers_of(Group *g, int i) { return (uint32_t *)(g->small + (size_t)i * LINE + 4); }
static inline char *half_of(Group *g, int i, uint32_t round) {
    return g->small + (size_t)g->n * LINE + ((size_t)i * 2 + (round & 1)) * HALF_BYTES;
}
static inline size_t payload_at(uint32_t header_len) { return (HEADER_AT + header_len + 63) & ~(size_t)63; }

static inline int reached(uint32_t value, uint32_t round) { return (int32_t)(value - round) >= 0; }

static int signalled(Group *g) {
    struct pollfd polls[MAX_MEMBERS];
    int members[MAX_MEMBERS];
    int count = 0;
    for (int i = 0; i < g->n; i++) {
        if (i == g->index || g->fds[i] < 0) continue;
        polls[count].fd = g->fds[i];
        polls[count].events = POLLIN;
        polls[count].revents = 0;
        members[count++] = i;
    }
    if (count == 0 || poll(polls, count, 0) <= 0) return -1;
    for (int k = 0; k < count; k++)
        if (polls[k].revents) return members[k];
    return -1;
}

/* Wait until member i's counter reached `round`. Called without the GIL; takes it back only to run signal
 * handlers (Ctrl-C) when a sleep is interrupted. Returns a status (ST_REDUCED when reached), or -100 with a
 * Python exception set. */
static int wait_member(Group *g, int i, uint32_t round, PyThreadState **state) {
    uint32_t *c = counter_of(g, i);
    if (reached(__atomic_load_n(c, __ATOMIC_ACQUIRE), round)) return ST_REDUCED;
    long long start = now_ns();
    for (int spins = 0;; spins++) {
        if (reached(__atomic_load_n(c, __ATOMIC_ACQUIRE), round)) return ST_REDUCED;
        if (spins < 128) {
            __builtin_ia32_pause();
        } else {
            sched_yield(); /* ranks may share cores: give it to the one this rank waits for */
            if (now_ns() - start > SPIN_NS) break;
        }
    }
    uint32_t *sleepers = sleepers_of(g, i);
    __atomic_fetch_add(sleepers, 1, __ATOMIC_SEQ_CST);
    long long deadline = start + g->timeout_ns;
    long long slice = FIRST_SLICE_NS;
    int status = ST_REDUCED;
    for (;;) {
        uint32_t value = __atomic_load_n(c, __ATOMIC_SEQ_CST);
        if (reached(value, round)) break;
        uint64_t closed = *g->closed;
        if (closed) { g->who = (int)closed - 1; status = ST_CLOSED; break; }
        int lost = signalled(g);
        if (lost >= 0) { g->who = lost; status = ST_SIGNALLED; break; }
        long long remaining = deadline - now_ns();
        if (remaining <= 0) { g->who = i; status = ST_TIMEOUT; break; }
        long long wait = remaining < slice ? remaining : slice;
        struct timespec ts = {(time_t)(wait / 1000000000LL), (long)(wait % 1000000000LL)};
        syscall(SYS_futex, c, FUTEX_WAIT, value, &ts, NULL, 0);
        if (!reached(__atomic_load_n(c, __ATOMIC_SEQ_CST), round)) {
            /* a Ctrl-C (or any signal whose handler raises) ends the wait: the signal may have gone to another
             * thread, so look after every sleep that brought nothing, not only after EINTR */
            PyEval_RestoreThread(*state);
            int failed = PyErr_CheckSignals();
            *state = PyEval_SaveThread();
            if (failed) { status = -100; break; }
        }
        slice = slice * 2 < SLICE_NS ? slice * 2 : SLICE_NS;
    }
    __atomic_fetch_sub(sleepers, 1, __ATOMIC_SEQ_CST);
    return status;
}

/* Publish this rank's half of the next round and wait for everyone's. */
static int publish_and_wait(Group *g, const char *header, uint32_t header_len, long long seq, const char *payload,
                            uint32_t payload_len, PyThreadState **state) {
    long long t0 = g->profile ? now_ns() : 0;
    uint32_t round = g->round + 1;
    char *mine = half_of(g, g->index, round);
    ((uint32_t *)mine)[0] = header_len;
    ((uint32_t *)mine)[1] = payload_len;
    memcpy(mine + HEADER_AT, header, header_len);
    if (seq >= 0) {
        uint64_t s = __builtin_bswap64((uint64_t)seq);
        memcpy(mine + HEADER_AT + SEQ_AT, &s, 8);
    }
    if (payload_len) memcpy(mine + payload_at(header_len), payload, payload_len);
    g->round = round;
    uint32_t *c = counter_of(g, g->index);
    __atomic_store_n(c, round, __ATOMIC_SEQ_CST); /* the data written before is visible before the counter */
    if (__atomic_load_n(sleepers_of(g, g->index), __ATOMIC_SEQ_CST))
        syscall(SYS_futex, c, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
    long long t1 = g->profile ? now_ns() : 0;
    for (int i = 0; i < g->n; i++) {
        if (i == g->index) continue;
        int status = wait_member(g, i, round, state);
        if (status != ST_REDUCED) return status;
    }
    g->peers_ns = now_ns(); /* for the timeline: every op's wait for its peers, at the cost of one vDSO call */
    if (g->profile) {
        g->copy_ns += t1 - t0;
        g->wait_ns += g->peers_ns - t1;
    }
    return ST_EXCHANGED;
}

/* The reduction, as ring.reduce_rank_ordered does it with numpy (NaNs included: where both addends are NaN, the
 * first one's payload wins, as x86's add gives numpy; written out, since a compiler may swap a + b's operands): acc = rank 0's copy, then acc = op(acc, rank i's)
 * for i = 1..n-1 in order, then the mean's division (floor division for integers). Integers wrap as numpy's do;
 * min and max follow numpy's rule (a NaN in either propagates, the first one wins; between equal values,
 * -0.0 and 0.0 among them, the second). */
#define BLOCK 512 /* elements combined over all rows while they sit in the L1 cache */
#define CLONES __attribute__((target_clones("avx2", "default")))

/* out = op(out, row) over one block. Floats: a block without NaN inputs takes the plain loop (vectorised; an inf
 * minus inf gives the same default NaN either way round), one with a NaN the written-out rule. */
#define DEFINE_COMBINE(NAME, T, UT, IS_FLOAT)                                                                      \
    CLONES static void NAME(T *restrict out, const T *restrict row, Py_ssize_t len, int op) {                     \
        int nan = 0;                                                                                               \
        if (IS_FLOAT)                                                                                              \
            for (Py_ssize_t j = 0; j < len; j++) nan |= (out[j] != out[j]) | (row[j] != row[j]);                  \
        if (op <= 1) {                                                                                             \
            if (!IS_FLOAT)                                                                                         \
                for (Py_ssize_t j = 0; j < len; j++) out[j] = (T)((UT)out[j] + (UT)row[j]);                        \
            else if (!nan)                                                                                         \
                for (Py_ssize_t j = 0; j < len; j++) out[j] = (T)(out[j] + row[j]);                                \
            else                                                                                                   \
                for (Py_ssize_t j = 0; j < len; j++) {                                                             \
                    T a = out[j], b = row[j];                                                                      \
                    out[j] = a != a ? (T)(a + a) : b != b ? (T)(b + b) : (T)(a + b);                               \
                }                                                                                                  \
        } else if (op == 2) {                                                                                      \
            if (!nan)                                                                                              \
                for (Py_ssize_t j = 0; j < len; j++) out[j] = out[j] < row[j] ? out[j] : row[j];                   \
            else                                                                                                   \
                for (Py_ssize_t j = 0; j < len; j++) {                                                             \
                    T a = out[j], b = row[j];                                                                      \
                    out[j] = (a < b || a != a) ? a : b;                                                            \
                }                                                                                                  \
        } else {                                                                                                   \
            if (!nan)                                                                                              \
                for (Py_ssize_t j = 0; j < len; j++) out[j] = out[j] > row[j] ? out[j] : row[j];                   \
            else                                                                                                   \
                for (Py_ssize_t j = 0; j < len; j++) {                                                             \
                    T a = out[j], b = row[j];                                                                      \
                    out[j] = (a > b || a != a) ? a : b;                                                            \
                }                                                                                                  \
        }                                                                                                          \
    }

#define DEFINE_REDUCE(NAME, T, UT, IS_FLOAT, MEAN)                                                                 \
    DEFINE_COMBINE(NAME##_combine, T, UT, IS_FLOAT)                                                                \
    CLONES static void NAME##_mean(T *restrict out, Py_ssize_t len, int n) {                                      \
        for (Py_ssize_t j = 0; j < len; j++) out[j] = MEAN(T, out[j], n);                                          \
    }                                                                                                              \
    static void NAME(T *out, T *const *rows, int n, Py_ssize_t count, int op) {                                    \
        for (Py_ssize_t start = 0; start < count; start += BLOCK) {                                                \
            Py_ssize_t len = count - start < BLOCK ? count - start : BLOCK;                                        \
            memcpy(out + start, rows[0] + start, (size_t)len * sizeof(T));                                         \
            for (int i = 1; i < n; i++) NAME##_combine(out + start, rows[i] + start, len, op);                     \
            if (op == 1) NAME##_mean(out + start, len, n);                                                         \
        }                                                                                                          \
    }

/* the mean's division: true division for floats, numpy's floor division for integers (n > 0) */
#define MEAN_FLOAT(T, a, n) ((a) / (T)(n))
#define MEAN_SIGNED(T, a, n) ((T)((a) / (T)(n) - (((a) % (T)(n) != 0) && ((a) < 0))))
#define MEAN_UNSIGNED(T, a, n) ((T)((a) / (T)(n)))

DEFINE_REDUCE(reduce_f32, float, float, 1, MEAN_FLOAT)
DEFINE_REDUCE(reduce_f64, double, double, 1, MEAN_FLOAT)
DEFINE_REDUCE(reduce_i8, int8_t, uint8_t, 0, MEAN_SIGNED)
DEFINE_REDUCE(reduce_i16, int16_t, uint16_t, 0, MEAN_SIGNED)
DEFINE_REDUCE(reduce_i32, int32_t, uint32_t, 0, MEAN_SIGNED)
DEFINE_REDUCE(reduce_i64, int64_t, uint64_t, 0, MEAN_SIGNED)
DEFINE_REDUCE(reduce_u8, uint8_t, uint8_t, 0, MEAN_UNSIGNED)
DEFINE_REDUCE(reduce_u16, uint16_t, uint16_t, 0, MEAN_UNSIGNED)
DEFINE_REDUCE(reduce_u32, uint32_t, uint32_t, 0, MEAN_UNSIGNED)
DEFINE_REDUCE(reduce_u64, uint64_t, uint64_t, 0, MEAN_UNSIGNED)

static const int ITEMSIZE[] = {4, 8, 1, 2, 4, 8, 1, 2, 4, 8};

static void reduce(int dtype, void *out, char **rows, int n, Py_ssize_t count, int op) {
    switch (dtype) {
    case 0: reduce_f32(out, (float *const *)rows, n, count, op); break;
    case 1: reduce_f64(out, (double *const *)rows, n, count, op); break;
    case 2: reduce_i8(out, (int8_t *const *)rows, n, count, op); break;
    case 3: reduce_i16(out, (int16_t *const *)rows, n, count, op); break;
    case 4: reduce_i32(out, (int32_t *const *)rows, n, count, op); break;
    case 5: reduce_i64(out, (int64_t *const *)rows, n, count, op); break;
    case 6: reduce_u8(out, (uint8_t *const *)rows, n, count, op); break;
    case 7: reduce_u16(out, (uint16_t *const *)rows, n, count, op); break;
    case 8: reduce_u32(out, (uint32_t *const *)rows, n, count, op); break;
    default: reduce_u64(out, (uint64_t *const *)rows, n, count, op); break;
    }
}

static int check_open(Group *g) {
    if (!g->held) {
        PyErr_SetString(PyExc_ValueError, "the group's segment was released");
        return -1;
    }
    return 0;
}

/* allreduce(array, header, seq, dtype, op) -> status
 * ST_REDUCED: the array holds the result. ST_EXCHANGED: every rank published, but the headers differ (or the
 * dtype is not one this module reduces): the caller reads the slots. ST_INELIGIBLE: nothing was published (the
 * array is not a writable C-contiguous buffer of at most PAYLOAD_CAP bytes). Negative: a failed wait (`who`). */
static PyObject *group_allreduce(Group *g, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "allreduce(array, header, seq, dtype, op)");
        return NULL;
    }
    if (check_open(g) < 0) return NULL;
    PyObject *header = args[1];
    if (!PyBytes_Check(header)) {
        PyErr_SetString(PyExc_TypeError, "header must be bytes");
        return NULL;
    }
    long long seq = PyLong_AsLongLong(args[2]);
    long dtype = PyLong_AsLong(args[3]);
    long op = PyLong_AsLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t header_len = PyBytes_GET_SIZE(header);
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return PyLong_FromLong(ST_INELIGIBLE);
    }
    if (view.len > PAYLOAD_CAP || header_len > HEADER_CAP || header_len < SEQ_AT + 8 || dtype > 9 || op < 0 ||
        op > 3 || (dtype >= 0 && view.len % ITEMSIZE[dtype])) {
        PyBuffer_Release(&view);
        return PyLong_FromLong(ST_INELIGIBLE);
    }
    PyThreadState *state = PyEval_SaveThread();
    int status = publish_and_wait(g, PyBytes_AS_STRING(header), (uint32_t)header_len, seq, view.buf,
                                  (uint32_t)view.len, &state);
    if (status == ST_EXCHANGED && dtype >= 0) {
        const char *mine = half_of(g, g->index, g->round);
        int same = 1;
        char *rows[MAX_MEMBERS];
        for (int i = 0; i < g->n; i++) {
            char *half = half_of(g, i, g->round);
            rows[i] = half + payload_at((uint32_t)header_len);
            if (i != g->index && (memcmp(half, mine, 8) != 0 || memcmp(half + HEADER_AT, mine + HEADER_AT,
                                                                          (size_t)header_len) != 0))
                same = 0;
        }
        if (same) {
            long long t0 = g->profile ? now_ns() : 0;
            reduce((int)dtype, view.buf, rows, g->n, view.len / ITEMSIZE[dtype], (int)op);
            if (g->profile) {
                g->reduce_ns += now_ns() - t0;
                g->calls++;
            }
            status = ST_REDUCED;
        }
    }
    PyEval_RestoreThread(state);
    PyBuffer_Release(&view);
    if (status == -100) return NULL;
    return PyLong_FromLong(status);
}

/* exchange(header, seq, payload or None) -> status: publish and wait (ST_EXCHANGED), the caller reads the slots. */
static PyObject *group_exchange(Group *g, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "exchange(header, seq, payload)");
        return NULL;
    }
    if (check_open(g) < 0) return NULL;
    Py_buffer header, payload;
    if (PyObject_GetBuffer(args[0], &header, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    long long seq = PyLong_AsLongLong(args[1]);
    if (seq == -1 && PyErr_Occurred()) {
        PyBuffer_Release(&header);
        return NULL;
    }
    int has_payload = args[2] != Py_None;
    if (has_payload && PyObject_GetBuffer(args[2], &payload, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&header);
        return NULL;
    }
    Py_ssize_t payload_len = has_payload ? payload.len : 0;
    if (header.len > HEADER_CAP || header.len < SEQ_AT + 8 || payload_len > PAYLOAD_CAP) {
        PyBuffer_Release(&header);
        if (has_payload) PyBuffer_Release(&payload);
        PyErr_SetString(PyExc_ValueError, "the header or the payload does not fit in a slot");
        return NULL;
    }
    PyThreadState *state = PyEval_SaveThread();
    int status = publish_and_wait(g, header.buf, (uint32_t)header.len, seq, has_payload ? payload.buf : NULL,
                                  (uint32_t)payload_len, &state);
    PyEval_RestoreThread(state);
    PyBuffer_Release(&header);
    if (has_payload) PyBuffer_Release(&payload);
    if (status == -100) return NULL;
    return PyLong_FromLong(status);
}

static PyObject *group_wake(Group *g, PyObject *unused) {
    if (g->held)
        for (int i = 0; i < g->n; i++) syscall(SYS_futex, counter_of(g, i), FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
    Py_RETURN_NONE;
}

static PyObject *group_release(Group *g, PyObject *unused) {
    if (g->held) {
        g->held = 0;
        PyBuffer_Release(&g->segment);
    }
    Py_RETURN_NONE;
}

static PyObject *group_set_profile(Group *g, PyObject *arg) {
    g->profile = PyObject_IsTrue(arg);
    if (g->profile) g->calls = g->copy_ns = g->wait_ns = g->reduce_ns = 0;
    Py_RETURN_NONE;
}

static PyObject *group_profile(Group *g, PyObject *unused) {
    return Py_BuildValue("{s:L,s:L,s:L,s:L}", "calls", g->calls, "copy_ns", g->copy_ns, "wait_ns", g->wait_ns,
                         "reduce_ns", g->reduce_ns);
}

static int group_init(Group *g, PyObject *args, PyObject *kwargs) {
    PyObject *segment, *fds;
    Py_ssize_t small_at, closed_at;
    int index, n;
    double timeout_s;
    if (!PyArg_ParseTuple(args, "OnniiOd", &segment, &small_at, &closed_at, &index, &n, &fds, &timeout_s))
        return -1;
    if (n < 1 || n > MAX_MEMBERS || index < 0 || index >= n || !PyTuple_Check(fds) || PyTuple_GET_SIZE(fds) != n ||
        !(timeout_s > 0)) {
        PyErr_SetString(PyExc_ValueError, "Group(segment, small_at, closed_at, index, n, fds, timeout_s)");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        g->fds[i] = (int)PyLong_AsLong(PyTuple_GET_ITEM(fds, i));
        if (PyErr_Occurred()) return -1;
    }
    if (g->held) {
        g->held = 0;
        PyBuffer_Release(&g->segment);
    }
    if (PyObject_GetBuffer(segment, &g->segment, PyBUF_WRITABLE) < 0) return -1;
    Py_ssize_t need = small_at + (Py_ssize_t)n * LINE + (Py_ssize_t)n * 2 * HALF_BYTES;
    if (small_at % LINE || closed_at % 8 || need > g->segment.len || closed_at + 8 > g->segment.len) {
        PyBuffer_Release(&g->segment);
        PyErr_SetString(PyExc_ValueError, "the segment is too small for the small area");
        return -1;
    }
    g->held = 1;
    g->small = (char *)g->segment.buf + small_at;
    g->closed = (volatile uint64_t *)((char *)g->segment.buf + closed_at);
    g->index = index;
    g->n = n;
    g->timeout_ns = (long long)(timeout_s * 1e9);
    g->round = __atomic_load_n(counter_of(g, index), __ATOMIC_SEQ_CST);
    g->who = -1;
    return 0;
}

static void group_dealloc(Group *g) {
    if (g->held) PyBuffer_Release(&g->segment);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static PyObject *group_get_round(Group *g, void *closure) { return PyLong_FromUnsignedLong(g->round); }
static PyObject *group_get_who(Group *g, void *closure) { return PyLong_FromLong(g->who); }
static PyObject *group_get_peers_ns(Group *g, void *closure) { return PyLong_FromLongLong(g->peers_ns); }

static PyMethodDef group_methods[] = {
    {"allreduce", (PyCFunction)(void (*)(void))group_allreduce, METH_FASTCALL, "publish, wait, reduce"},
    {"exchange", (PyCFunction)(void (*)(void))group_exchange, METH_FASTCALL, "publish and wait"},
    {"wake", (PyCFunction)group_wake, METH_NOARGS, "wake every sleeper of the small area"},
    {"release", (PyCFunction)group_release, METH_NOARGS, "let go of the segment"},
    {"set_profile", (PyCFunction)group_set_profile, METH_O, "time the steps (True also zeroes the totals)"},
    {"profile", (PyCFunction)group_profile, METH_NOARGS, "the steps' totals"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef group_getset[] = {
    {"round", (getter)group_get_round, NULL, "the last round this rank published", NULL},
    {"who", (getter)group_get_who, NULL, "the member (global rank when closed) a failed wait names", NULL},
    {"peers_ns", (getter)group_get_peers_ns, NULL, "when the last round's wait for the peers ended (perf_counter_ns)",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject GroupType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hopsml.collective._fastshm.Group",
    .tp_basicsize = sizeof(Group),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One rank's view of the small area of its host segment.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)group_init,
    .tp_dealloc = (destructor)group_dealloc,
    .tp_methods = group_methods,
    .tp_getset = group_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastshm", "The compiled small same-host exchange.", -1,
                                    NULL};

PyMODINIT_FUNC PyInit__fastshm(void) {
    if (PyType_Ready(&GroupType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&GroupType);
    if (PyModule_AddObject(m, "Group", (PyObject *)&GroupType) < 0 ||
        PyModule_AddIntConstant(m, "HEADER_AT", HEADER_AT) < 0 || PyModule_AddIntConstant(m, "HEADER_CAP", HEADER_CAP) < 0 ||
        PyModule_AddIntConstant(m, "PAYLOAD_CAP", PAYLOAD_CAP) < 0 ||
        PyModule_AddIntConstant(m, "HALF_BYTES", HALF_BYTES) < 0 || PyModule_AddIntConstant(m, "LINE", LINE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
