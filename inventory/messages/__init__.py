"""Every message that leaves the process, one module per concept: `names` (the
kinds, headers and task names messages carry, and the kind a dead letter stands
for), `queues` (the confirm stream's partitions and queues, the dead-letter
queue), `encoding` (confirm and fence bodies, signed, and their reading),
`publisher` (a connection per thread, the confirmed send, the sends of the
sweeps and the confirm consumer), `group_publisher` (the purchase path's
publish, many requests to a message), `celery_sends` (gives as Celery task
messages) and `broker_probe` (the confirm stream's depth, for the health check
and the live view). Callers import the module that holds what they use; this
package imports none of them.

Confirm messages carry reservations from the gate to the confirm consumer
(`orders.consumers`). They are not Celery task messages: the body is a small
signed JSON list, read in bulk by one active consumer per queue, because Celery's
per-message machinery costs more CPU than the confirm itself (docs/architecture.md,
"The confirm consumer"). Gives are ordinary Celery tasks, sent by name.
"""
