#!/usr/bin/env python3
"""Flue's lifecycle events with a plain NATS client (nats-py), no Flue code involved.

    pip install 'nats-py[nkeys]==2.16.0'
    python3 flue_events.py nats://127.0.0.1:4222 default                 # live, from now on
    python3 flue_events.py nats://127.0.0.1:4222 default --seq 1         # replay from sequence 1
    python3 flue_events.py nats://127.0.0.1:4222 default --since 2026-11-21T10:00:00Z
    python3 flue_events.py ... --subject 'flue.default.evt.*.*.web1.>'   # one server only
    python3 flue_events.py ... --seq 1 --idle 2                          # stop after 2 s of quiet
    python3 flue_events.py tls://broker:4222 default --ca ca.pem        # TLS, verified against ca.pem
    python3 flue_events.py ... --creds listener.creds --domain flue --consumer lsn-…-1   # a secured broker

On a secured broker (operator mode, `flue-gateway init`) connect with a listener's
credentials: a user of the tenant's events account that may read and replay that tenant's
events and nothing else. Address the hub's JetStream domain (`flue`), which also works behind
a leaf node, and name the consumer: the credentials allow only their own consumer names
(`lsn-<listener>-1` to `-8`, printed by `flue events credentials`), one per listener running
at once. The consumer is deleted when this script ends, and by the broker once idle
(the gateway's `--listener-idle-secs`, 1 hour by default).

Each line printed: the stream sequence, the CloudEvent type, its subject and id. Events
live in the JetStream stream FLUE_EVT on subjects
flue.<tenant>.evt.<kind>.<stack|~>.<server|~>.<name>; an ordered consumer replays them in
order and goes on live. Keep the last sequence you handled and restart from it + 1 to
miss nothing after a disconnect.
"""
import argparse
import asyncio
import json
import ssl
import sys
from datetime import datetime

import nats
import nats.js.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

STREAM = "FLUE_EVT"
# A pull waits this long at most for events: well under the two minutes the broker keeps
# an answer's route open for a request made through an account import.
PULL_WAIT = 30.0


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("url")
    p.add_argument("tenant")
    p.add_argument("--subject", help="subject filter (default: every event of the tenant)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--seq", type=int, help="replay from this stream sequence")
    start.add_argument("--since", help="replay from this RFC 3339 time")
    p.add_argument("--idle", type=float, help="exit after this many seconds without an event, "
                   "once none is left to read")
    p.add_argument("--ca", help="CA certificate (PEM) the broker's certificate must chain to; "
                   "given, the connection is TLS and only this CA is trusted")
    p.add_argument("--creds", help="listener credentials file (.creds) for a secured broker")
    p.add_argument("--domain", help="JetStream domain of the hub broker (flue on a secured one)")
    p.add_argument("--consumer", help="the consumer's name, one your listener credentials allow "
                   "(lsn-<listener>-<1..8>); required with --creds")
    args = p.parse_args()
    if args.creds and not args.consumer:
        p.error("--consumer is required with --creds: listener credentials create only their own consumer names")

    subject = args.subject or f"flue.{args.tenant}.evt.>"
    common = {"name": args.consumer, "ack_policy": AckPolicy.NONE, "filter_subject": subject}
    if args.seq is not None:
        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                                opt_start_seq=args.seq, **common)
    elif args.since is not None:
        since = datetime.fromisoformat(args.since.replace("Z", "+00:00"))
        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME,
                                opt_start_time=since.isoformat(), **common)
    else:
        config = ConsumerConfig(deliver_policy=DeliverPolicy.NEW, **common)

    async def on_error(e: Exception) -> None:
        # A broker whose certificate cannot be verified stays so: stop instead of retrying.
        if isinstance(e, ssl.SSLCertVerificationError):
            raise e
        print(f"nats: {e!r}", file=sys.stderr)

    options = {"error_cb": on_error}
    if args.ca:
        # A CA given means TLS: never a plaintext fallback.
        options["tls"] = ssl.create_default_context(cafile=args.ca)
    if args.creds:
        options["user_credentials"] = args.creds
    nc = await nats.connect(args.url, **options)
    js = nc.jetstream(domain=args.domain)
    if args.consumer:
        # A named consumer left by an earlier run (until it is idle long enough) would
        # refuse the new start position: start afresh.
        try:
            await js.delete_consumer(STREAM, args.consumer)
        except nats.js.errors.NotFoundError:
            pass
    try:
        info = await js.add_consumer(STREAM, config=config)
    except nats.js.errors.APIError as e:
        print(f"cannot create the consumer: {e.description}", file=sys.stderr)
        await nc.close()
        sys.exit(1)
    sub = await js.pull_subscribe_bind(stream=STREAM, name=info.name)
    try:
        while True:
            try:
                msgs = await sub.fetch(batch=100, timeout=min(args.idle or PULL_WAIT, PULL_WAIT))
            except asyncio.TimeoutError:
                # nats-py raises its own TimeoutError (a subclass) or asyncio's, depending on
                # where in the pull the time ran out: catch both. Quiet means nothing came
                # *and* nothing is left to read: on a loaded machine a pull can time out with
                # events still waiting.
                if args.idle and (await sub.consumer_info()).num_pending == 0:
                    break
                continue
            for msg in msgs:
                event = json.loads(msg.data)
                print(msg.metadata.sequence.stream, event["type"], event["subject"], event["id"], flush=True)
    finally:
        if args.consumer:
            try:
                await js.delete_consumer(STREAM, args.consumer)
            except nats.errors.Error as e:
                print(f"cannot delete consumer {args.consumer}: {e!r}", file=sys.stderr)
        await nc.close()


if __name__ == "__main__":
    asyncio.run(main())
