/* libpq, loaded when a PostgreSQL database is first opened (dlopen of
 * libpq.so.5), not linked: the server's commands that never see a
 * postgresql:// URL — the SQLite default, and every short CLI command such
 * as `dispatch` — do not pay for loading libpq and the dozen libraries it
 * needs (TLS, Kerberos, LDAP: some 2.5 ms of CPU per process start).
 *
 * Include this instead of <libpq-fe.h>: it declares libpq's types and
 * turns each PQ* call used by the server into a call through the loaded
 * table. pq_load() must have returned 0 before the first call (db_pg.c's
 * open does it); the calls after a failed load are never reached. Pipeline
 * mode (PQenterPipelineMode...) needs libpq 14 or newer (Debian 12: 15). */
#ifndef CORDON_SERVER_PQ_H
#define CORDON_SERVER_PQ_H

#include <libpq-fe.h>

#include "core/error.h"

#define PQ_FUNCTIONS(X)                                                                            \
  X(PGresult *, PQexec, (PGconn * c, const char *q))                                               \
  X(PGresult *, PQexecParams,                                                                      \
    (PGconn * c, const char *q, int n, const Oid *types, const char *const *values,                \
     const int *lengths, const int *formats, int result_format))                                   \
  X(int, PQsendPrepare, (PGconn * c, const char *name, const char *q, int n, const Oid *types))    \
  X(int, PQsendQueryPrepared,                                                                      \
    (PGconn * c, const char *name, int n, const char *const *values, const int *lengths,           \
     const int *formats, int result_format))                                                       \
  X(int, PQsendQueryParams,                                                                        \
    (PGconn * c, const char *q, int n, const Oid *types, const char *const *values,                \
     const int *lengths, const int *formats, int result_format))                                   \
  X(PGresult *, PQgetResult, (PGconn * c))                                                         \
  X(int, PQenterPipelineMode, (PGconn * c))                                                        \
  X(int, PQexitPipelineMode, (PGconn * c))                                                         \
  X(int, PQpipelineSync, (PGconn * c))                                                             \
  X(void, PQclear, (PGresult * r))                                                                 \
  X(char *, PQcmdStatus, (PGresult * r))                                                           \
  X(char *, PQcmdTuples, (PGresult * r))                                                           \
  X(PGconn *, PQconnectdbParams,                                                                   \
    (const char *const *keywords, const char *const *values, int expand_dbname))                   \
  X(PGconn *, PQconnectStartParams,                                                                \
    (const char *const *keywords, const char *const *values, int expand_dbname))                   \
  X(PostgresPollingStatusType, PQconnectPoll, (PGconn * c))                                        \
  X(void, PQconninfoFree, (PQconninfoOption * o))                                                  \
  X(PQconninfoOption *, PQconninfoParse, (const char *conninfo, char **errmsg))                    \
  X(int, PQconsumeInput, (PGconn * c))                                                             \
  X(char *, PQerrorMessage, (const PGconn *c))                                                     \
  X(void, PQfinish, (PGconn * c))                                                                  \
  X(void, PQfreemem, (void *p))                                                                    \
  X(int, PQgetisnull, (const PGresult *r, int row, int col))                                       \
  X(char *, PQgetvalue, (const PGresult *r, int row, int col))                                     \
  X(int, PQnfields, (const PGresult *r))                                                           \
  X(PGnotify *, PQnotifies, (PGconn * c))                                                          \
  X(int, PQntuples, (const PGresult *r))                                                           \
  X(char *, PQresultErrorField, (const PGresult *r, int field))                                    \
  X(char *, PQresultErrorMessage, (const PGresult *r))                                             \
  X(ExecStatusType, PQresultStatus, (const PGresult *r))                                           \
  X(PQnoticeProcessor, PQsetNoticeProcessor, (PGconn * c, PQnoticeProcessor p, void *arg))         \
  X(int, PQsocket, (const PGconn *c))                                                              \
  X(ConnStatusType, PQstatus, (const PGconn *c))                                                   \
  X(PGTransactionStatusType, PQtransactionStatus, (const PGconn *c))                               \
  X(unsigned char *, PQunescapeBytea, (const unsigned char *from, size_t *to_length))

struct pq_api {
#define PQ_API_FIELD_(ret, name, params) ret(*name) params;
  PQ_FUNCTIONS(PQ_API_FIELD_)
#undef PQ_API_FIELD_
};

extern struct pq_api pq_api;

/* Load libpq.so.5 once (later calls return the first outcome): 0, or
 * CORDON_E_CONFIG_INVALID with a one-line diag naming the library and why
 * (not installed: the package to install). */
int pq_load(struct cordon_diag *diag);

#ifndef CORDON_PQ_NO_MACROS
#define PQexec (pq_api.PQexec)
#define PQexecParams (pq_api.PQexecParams)
#define PQsendPrepare (pq_api.PQsendPrepare)
#define PQsendQueryPrepared (pq_api.PQsendQueryPrepared)
#define PQsendQueryParams (pq_api.PQsendQueryParams)
#define PQgetResult (pq_api.PQgetResult)
#define PQenterPipelineMode (pq_api.PQenterPipelineMode)
#define PQexitPipelineMode (pq_api.PQexitPipelineMode)
#define PQpipelineSync (pq_api.PQpipelineSync)
#define PQclear (pq_api.PQclear)
#define PQcmdStatus (pq_api.PQcmdStatus)
#define PQcmdTuples (pq_api.PQcmdTuples)
#define PQconnectdbParams (pq_api.PQconnectdbParams)
#define PQconnectStartParams (pq_api.PQconnectStartParams)
#define PQconnectPoll (pq_api.PQconnectPoll)
#define PQconninfoFree (pq_api.PQconninfoFree)
#define PQconninfoParse (pq_api.PQconninfoParse)
#define PQconsumeInput (pq_api.PQconsumeInput)
#define PQerrorMessage (pq_api.PQerrorMessage)
#define PQfinish (pq_api.PQfinish)
#define PQfreemem (pq_api.PQfreemem)
#define PQgetisnull (pq_api.PQgetisnull)
#define PQgetvalue (pq_api.PQgetvalue)
#define PQnfields (pq_api.PQnfields)
#define PQnotifies (pq_api.PQnotifies)
#define PQntuples (pq_api.PQntuples)
#define PQresultErrorField (pq_api.PQresultErrorField)
#define PQresultErrorMessage (pq_api.PQresultErrorMessage)
#define PQresultStatus (pq_api.PQresultStatus)
#define PQsetNoticeProcessor (pq_api.PQsetNoticeProcessor)
#define PQsocket (pq_api.PQsocket)
#define PQstatus (pq_api.PQstatus)
#define PQtransactionStatus (pq_api.PQtransactionStatus)
#define PQunescapeBytea (pq_api.PQunescapeBytea)
#endif

#endif
