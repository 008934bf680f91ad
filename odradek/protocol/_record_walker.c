/*
 * The leader's per-record walk of a produced batch (Kafka's LogValidator, record part).
 *
 * walk_records(records, count, base_timestamp, min_timestamp, max_timestamp, flags,
 *              max_problems) -> (max record timestamp, number of problems, problems or None)
 *
 * `records` is an uncompressed records section (the bytes after a v2 batch header, or
 * what a compressed one inflates to) that must hold exactly `count` DefaultRecords.
 * Structural damage -- a truncated or overlong varint, a length out of range, an offset
 * delta other than the record's index, a record whose fields do not fill its length, a
 * record count other than `count`, bytes after the last record -- raises
 * RecordWalkError naming the record. Policy problems are returned, at most one per
 * record and at most `max_problems` of them (the count is of all), as (index, reason,
 * timestamp): reason PROBLEM_NO_KEY (WALK_KEY_REQUIRED and a null key) or
 * PROBLEM_TIMESTAMP (WALK_CHECK_TIMESTAMPS and a timestamp other than -1 outside
 * [min, max]); a missing key wins over a timestamp, as in Kafka. The maximum timestamp
 * starts at -1 (no timestamp).
 *
 * The bytes are hostile: every read is checked against the end of the record it belongs
 * to, nothing is allocated from a length, and nothing here reads past `records`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define WALK_KEY_REQUIRED 1
#define WALK_CHECK_TIMESTAMPS 2
#define PROBLEM_NO_KEY 1
#define PROBLEM_TIMESTAMP 2

/* attributes + timestampDelta + offsetDelta + keyLength + valueLength + headerCount */
#define MIN_RECORD_BODY 6

static PyObject *RecordWalkError;

enum { OK = 0, TRUNCATED = 1, OVERLONG = 2 };

static const char *const varint_errors[] = {"", "truncated", "longer than its type allows"};

/* A zigzag varint of at most 5 bytes (Java int). The fifth byte may carry only the 4
 * bits left of 32: more is not a value any encoder writes. */
static inline int
read_varint(const uint8_t **pos, const uint8_t *end, int32_t *out)
{
    const uint8_t *p = *pos;
    uint32_t value = 0;
    for (int shift = 0; shift <= 28; shift += 7) {
        if (p >= end)
            return TRUNCATED;
        uint8_t b = *p++;
        if (shift == 28 && (b & 0xF0))
            return OVERLONG;
        value |= (uint32_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = (int32_t)((value >> 1) ^ (0u - (value & 1u)));
            *pos = p;
            return OK;
        }
    }
    return OVERLONG; /* unreachable: the fifth byte either ends it or fails above */
}

/* A zigzag varlong of at most 10 bytes (Java long); the tenth carries 1 bit. */
static inline int
read_varlong(const uint8_t **pos, const uint8_t *end, int64_t *out)
{
    const uint8_t *p = *pos;
    uint64_t value = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
        if (p >= end)
            return TRUNCATED;
        uint8_t b = *p++;
        if (shift == 63 && (b & 0xFE))
            return OVERLONG;
        value |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)((value >> 1) ^ (0ull - (value & 1ull)));
            *pos = p;
            return OK;
        }
    }
    return OVERLONG;
}

/* Sets RecordWalkError and returns NULL, so a failed check is `return fail(...)`. */
static PyObject *
fail(Py_ssize_t index, const char *format, long long a, long long b)
{
    char what[160];
    PyOS_snprintf(what, sizeof what, format, a, b);
    PyErr_Format(RecordWalkError, "record %zd: %s", index, what);
    return NULL;
}

static PyObject *
walk(const uint8_t *data, Py_ssize_t size, Py_ssize_t count, int64_t base_timestamp,
     int64_t min_timestamp, int64_t max_timestamp, int flags, Py_ssize_t max_problems)
{
    const uint8_t *p = data;
    const uint8_t *const end = data + size;
    int64_t largest = -1; /* RecordBatch.NO_TIMESTAMP */
    Py_ssize_t problem_count = 0;
    const char *field; /* the varint that failed, for the message */
    int rc;
    Py_ssize_t i;
    PyObject *problems = NULL; /* created for the first problem: most batches have none */

#define READ(kind, target, limit, name)                                                \
    if ((rc = read_##kind(&p, (limit), (target))) != OK) {                             \
        field = (name);                                                                \
        goto bad_varint;                                                               \
    }

    for (i = 0; i < count; i++) {
        int32_t length, offset_delta, key_length, value_length, header_count;
        int64_t timestamp_delta;

        if (p >= end) {
            Py_XDECREF(problems);
            return fail(i, "missing: the batch says %lld records, the data ends after %lld",
                        (long long)count, (long long)i);
        }
        READ(varint, &length, end, "length")
        if (length < MIN_RECORD_BODY || length > end - p) {
            Py_XDECREF(problems);
            return fail(i, "length %lld is out of range (%lld bytes left)", length,
                        (long long)(end - p));
        }
        const uint8_t *const body_end = p + length;
        p++; /* attributes: unused in v2, any value passes (as in Kafka) */

        READ(varlong, &timestamp_delta, body_end, "timestamp delta")
        READ(varint, &offset_delta, body_end, "offset delta")
        if (offset_delta != i) {
            Py_XDECREF(problems);
            return fail(i, "offset delta %lld, expected %lld (deltas run 0..n-1)",
                        offset_delta, (long long)i);
        }
        READ(varint, &key_length, body_end, "key length")
        if (key_length < -1 || key_length > body_end - p) {
            Py_XDECREF(problems);
            return fail(i, "key length %lld is out of range (%lld bytes left)", key_length,
                        (long long)(body_end - p));
        }
        if (key_length > 0)
            p += key_length;
        READ(varint, &value_length, body_end, "value length")
        if (value_length < -1 || value_length > body_end - p) {
            Py_XDECREF(problems);
            return fail(i, "value length %lld is out of range (%lld bytes left)", value_length,
                        (long long)(body_end - p));
        }
        if (value_length > 0)
            p += value_length;
        READ(varint, &header_count, body_end, "header count")
        /* each header takes at least 2 bytes: key length and value length */
        if (header_count < 0 || header_count > (body_end - p) / 2) {
            Py_XDECREF(problems);
            return fail(i, "header count %lld is out of range (%lld bytes left)", header_count,
                        (long long)(body_end - p));
        }
        for (int32_t h = 0; h < header_count; h++) {
            int32_t hkey, hvalue;
            READ(varint, &hkey, body_end, "header key length")
            if (hkey < 0 || hkey > body_end - p) {
                Py_XDECREF(problems);
                return fail(i, hkey < 0 ? "header %lld has a null key (length %lld)"
                                        : "header %lld key length %lld overruns the record",
                            (long long)h, hkey);
            }
            p += hkey;
            READ(varint, &hvalue, body_end, "header value length")
            if (hvalue < -1 || hvalue > body_end - p) {
                Py_XDECREF(problems);
                return fail(i, "header %lld value length %lld is out of range", (long long)h,
                            hvalue);
            }
            if (hvalue > 0)
                p += hvalue;
        }
        if (p != body_end) {
            Py_XDECREF(problems);
            return fail(i, "length %lld, but its fields end %lld bytes earlier", length,
                        (long long)(body_end - p));
        }

        /* Java's long arithmetic: wraps, never undefined */
        int64_t timestamp = (int64_t)((uint64_t)base_timestamp + (uint64_t)timestamp_delta);
        if (timestamp > largest)
            largest = timestamp;
        int reason = 0;
        if ((flags & WALK_KEY_REQUIRED) && key_length < 0)
            reason = PROBLEM_NO_KEY;
        else if ((flags & WALK_CHECK_TIMESTAMPS) && timestamp != -1 &&
                 (timestamp < min_timestamp || timestamp > max_timestamp))
            reason = PROBLEM_TIMESTAMP;
        if (reason) {
            if (problem_count < max_problems) {
                if (problems == NULL && (problems = PyList_New(0)) == NULL)
                    return NULL;
                PyObject *item = Py_BuildValue("(niL)", i, reason, (long long)timestamp);
                if (item == NULL || PyList_Append(problems, item) < 0) {
                    Py_XDECREF(item);
                    Py_XDECREF(problems);
                    return NULL;
                }
                Py_DECREF(item);
            }
            problem_count++;
        }
    }
#undef READ
    if (p != end) {
        Py_XDECREF(problems);
        PyErr_Format(RecordWalkError, "%zd bytes follow the last of the %zd records",
                     (Py_ssize_t)(end - p), count);
        return NULL;
    }
    PyObject *result = Py_BuildValue("(LnO)", (long long)largest, problem_count,
                                     problems != NULL ? problems : Py_None);
    Py_XDECREF(problems);
    return result;

bad_varint:
    Py_XDECREF(problems);
    PyErr_Format(RecordWalkError, "record %zd: its %s varint is %s", i, field,
                 varint_errors[rc]);
    return NULL;
}

static PyObject *
walk_records(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count, max_problems;
    long long base_timestamp, min_timestamp, max_timestamp;
    int flags;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*nLLLin:walk_records", &view, &count, &base_timestamp,
                          &min_timestamp, &max_timestamp, &flags, &max_problems))
        return NULL;
    PyObject *result;
    if (count < 0 || max_problems < 0) {
        PyErr_SetString(PyExc_ValueError, "count and max_problems must be >= 0");
        result = NULL;
    } else {
        result = walk((const uint8_t *)view.buf, view.len, count, base_timestamp,
                      min_timestamp, max_timestamp, flags, max_problems);
    }
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"walk_records", walk_records, METH_VARARGS,
     "walk_records(records, count, base_timestamp, min_timestamp, max_timestamp, flags, "
     "max_problems) -> (max_timestamp, problem_count, [(index, reason, timestamp), ...] or None)\n\n"
     "Walks an uncompressed records section of exactly `count` v2 records; structural "
     "damage raises RecordWalkError."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_record_walker",
    .m_doc = "The compiled per-record walk of produced batches "
             "(see odradek/storage/log_validator.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__record_walker(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    RecordWalkError = PyErr_NewException("odradek.protocol._record_walker.RecordWalkError",
                                         PyExc_ValueError, NULL);
    if (RecordWalkError == NULL || PyModule_AddObjectRef(m, "RecordWalkError", RecordWalkError) < 0 ||
        PyModule_AddIntConstant(m, "WALK_KEY_REQUIRED", WALK_KEY_REQUIRED) < 0 ||
        PyModule_AddIntConstant(m, "WALK_CHECK_TIMESTAMPS", WALK_CHECK_TIMESTAMPS) < 0 ||
        PyModule_AddIntConstant(m, "PROBLEM_NO_KEY", PROBLEM_NO_KEY) < 0 ||
        PyModule_AddIntConstant(m, "PROBLEM_TIMESTAMP", PROBLEM_TIMESTAMP) < 0) {
        Py_XDECREF(RecordWalkError);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
