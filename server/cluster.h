/* Several `cordon-server run` processes on one PostgreSQL database
 * (docs/ARCHITECTURE.md, "Cluster"): each process is an instance with a
 * random id. The device_sessions table (server/db.h) records which instance
 * holds each device's newest live session, under a lease the instance
 * renews with one UPDATE per tick. A newer session of the device on another
 * instance takes the row; the older instance sees at its next tick that the
 * row is gone from it and closes its session with `goaway replaced`.
 * "Online" is a local session or a live lease anywhere. Devices whose lease
 * passed (their server died) go offline at any instance's tick.
 *
 * Jobs reach a device on another instance through the queue: the dispatch
 * finds no local session, queues the job (its package kept in job_packages
 * too), and the instance the device is connected to sends it at its next
 * queue scan: at once when its LISTEN hears the NOTIFY of the queueing
 * instance, else at the scan's poll (server/jobs.c: a second at most).
 *
 * Events are relayed (PostgreSQL): every event of this server's bus
 * (server/events.h) goes to the others as a NOTIFY on
 * SERVER_DB_EVENTS_CHANNEL (server/relay.h; an output event one per
 * RELAY_CHUNK_MAX bytes), sent on the LISTEN connection in the loop turn
 * after it was published, with a MAC under a key derived from the
 * cluster's identity; what the others sent is published on this bus
 * marked remote (never sent on again), so `follow` and `watch` through any
 * server see the jobs and devices of all. Best-effort: a payload that
 * cannot be sent or read is dropped with a warning (rate-limited); a job's
 * stored state is what `job` and `wait` read.
 *
 * With SQLite (one server) nothing here writes: cluster_new gives a cluster
 * whose calls only consult the local sessions, and nothing is relayed. */
#ifndef CORDON_SERVER_CLUSTER_H
#define CORDON_SERVER_CLUSTER_H

#include <stdbool.h>
#include <uv.h>

#include "core/error.h"
#include "server/db.h"
#include "server/events.h"
#include "server/session.h"

#define CLUSTER_LEASE_S 10     /* seconds a device's row outlives its instance's last renewal */
#define CLUSTER_RENEW_MS 2000u /* how often an instance renews its leases and checks its rows */

struct cluster;

/* What the cluster asks of the daemon, with data. */
struct cluster_hooks {
  void *data;
  /* another instance queued a job (its NOTIFY): scan the queue now (the
   * queue scan's poll remains the fallback) */
  void (*queued)(void *data);
  /* now and then: drop the local copies of packages whose jobs left the
   * queue (another instance may have sent them) */
  void (*sweep)(void *data);
};

/* db, sessions, events (NULL: nothing relayed), state_dir and loop are
 * borrowed for the cluster's lifetime; secret (secret_len bytes: the
 * Noise static private key every server of the cluster holds) is read
 * during the call, for the relay's key (server/relay.h). 0, -EINVAL (a
 * secret of another length) or -ENOMEM. */
int cluster_new(uv_loop_t *loop, struct server_db *db, struct sessions *sessions,
                struct events *events, const uint8_t *secret, size_t secret_len,
                const char *state_dir, const struct cluster_hooks *hooks,
                struct cluster **out_cluster);
/* Its timers go (before the loop's last run), the events still waiting
 * are sent, no more are. NULL-safe. */
void cluster_close(struct cluster *c);
/* After the loop has finished. NULL-safe. */
void cluster_free(struct cluster *c);

/* This process's instance id (hex, random per start). */
const char *cluster_instance(const struct cluster *c);

/* At the daemon's start, before anything listens: which devices are
 * offline. SQLite: all of them. PostgreSQL: only those without a live lease
 * (another instance's devices stay online). */
int cluster_recover_devices(struct server_db *db, struct cordon_diag *diag);

/* The renewal tick starts; the instance id is logged. */
void cluster_start(struct cluster *c);

/* Hooks of the daemon's session events: a device's session is up (its row
 * is taken for this instance); it is closed (the row goes if it is still
 * this session's; the device stays online when another instance holds it). */
void cluster_on_session_online(struct cluster *c, struct session *s);
void cluster_on_session_closed(struct cluster *c, struct session *s);

/* Whether the device has a live session here or, through a live lease, on
 * another instance. */
bool cluster_device_online(struct cluster *c, const char *device_id);
/* Whether the device has a live lease (PostgreSQL; false with SQLite): for
 * a device with no session here, it is connected to another instance. */
bool cluster_device_leased(struct server_db *db, const char *device_id);

/* Queued jobs (PostgreSQL only; no-ops with SQLite): job_id was queued
 * with its package in path: the package is kept in the database (failures
 * are logged: the job is then sent only by this instance) and the other
 * instances are told (NOTIFY). Fetch a package into path (written whole,
 * then renamed) when this instance does not have it: 0, -ENOENT when the
 * database has none (yet), or an error. */
void cluster_job_queued(struct server_db *db, const char *job_id, const char *path);
int cluster_package_fetch(struct server_db *db, const char *job_id, const char *path);

#endif
