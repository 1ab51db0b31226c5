/* Converting a job result between its C form (core/result.h) and the wire
 * message (proto/msg.h). The message borrows the result's buffers: keep the
 * result alive while the message is encoded. */
#ifndef CORDON_PROTO_RESULT_MSG_H
#define CORDON_PROTO_RESULT_MSG_H

#include "proto/msg.h"
#include "core/result.h"

/* Fill out (type MSG_RESULT) from r; job and device ids given as raw bytes. */
void result_to_msg(const struct job_result *r, const uint8_t job_id[CORDON_ID_LEN],
                   const uint8_t device_id[CORDON_ID_LEN], struct msg *out);
/* Copy a received result message into r (which the caller initialised);
 * output buffers are copied. Returns 0 or -ENOMEM. */
int result_from_msg(const struct msg_result *m, struct job_result *r);

#endif
