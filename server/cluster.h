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
 * With SQLite (one server) nothing here writes: cluster_new gives a cluster
 * whose calls only consult the local sessions. */
#ifndef CORDON_SERVER_CLUSTER_H
#define CORDON_SERVER_CLUSTER_H

#include <stdbool.h>
#include <uv.h>

#include "core/error.h"
#include "server/db.h"
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

/* db, sessions, state_dir and loop are borrowed for the cluster's
 * lifetime. 0 or -ENOMEM. */
int cluster_new(uv_loop_t *loop, struct server_db *db, struct sessions *sessions,
                const char *state_dir, const struct cluster_hooks *hooks,
                struct cluster **out_cluster);
/* Its timer goes (before the loop's last run). NULL-safe. */
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
