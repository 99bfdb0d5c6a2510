"""The embedded broker (config.broker): messages are never read half-written, and each reaches one consumer."""

import threading
import time

from kombu import Connection, Exchange, Queue

from config.broker import PENDING_SUFFIX


def connection(tmp_path):
    for sub in ("queue", "processed", "control"):
        (tmp_path / sub).mkdir(exist_ok=True)
    return Connection(
        "filesystem://localhost/",
        transport="config.broker:Transport",
        transport_options={
            "data_folder_in": str(tmp_path / "queue"),
            "data_folder_out": str(tmp_path / "queue"),
            "processed_folder": str(tmp_path / "processed"),
            "control_folder": str(tmp_path / "control"),
            "store_processed": False,
            "polling_interval": 0.01,
        },
    )


def test_a_message_being_written_is_not_read(tmp_path):
    with connection(tmp_path) as conn:
        queue = conn.SimpleQueue("jobs")
        (tmp_path / "queue" / f"1_x.jobs.msg{PENDING_SUFFIX}").write_bytes(b"")  # a writer in the middle of it
        queue.put({"n": 1})
        assert queue.get(timeout=2).payload == {"n": 1}
        assert queue.qsize() == 0
        queue.close()


def test_a_reader_polling_while_a_large_message_is_written_gets_it_whole(tmp_path):
    big = {"blob": "y" * 30_000_000}  # long enough to serialise and write that a busy reader looks meanwhile
    with connection(tmp_path) as reader_conn, connection(tmp_path) as writer_conn:
        reader, writer = reader_conn.SimpleQueue("big"), writer_conn.SimpleQueue("big")
        thread = threading.Thread(target=writer.put, args=(big,))
        thread.start()
        message = reader.get(timeout=30)  # polls every 10 ms; kombu's own transport reads an empty file here
        thread.join()
        assert len(message.payload["blob"]) == 30_000_000
        reader.close()
        writer.close()


def test_concurrent_producers_reach_the_consumer_with_every_message_exactly_once(tmp_path):
    # the embedded set-up: web, beat and the worker publish while the worker consumes
    exchange = Exchange("race", type="direct")
    box = Queue("race", exchange, routing_key="race")
    total, producers = 400, 4
    received, errors, lock = [], [], threading.Lock()
    deadline = time.monotonic() + 60

    def produce(first):
        try:
            with connection(tmp_path) as conn:
                producer = conn.Producer(serializer="json")
                for n in range(first, total, producers):
                    producer.publish({"n": n, "pad": "x" * 2000}, exchange=exchange, routing_key="race", declare=[box])
        except Exception as exc:  # noqa: BLE001 - reported by the test below
            errors.append(repr(exc))

    def consume():
        try:
            with connection(tmp_path) as conn:
                simple = conn.SimpleQueue(box)
                while time.monotonic() < deadline:
                    with lock:
                        if len(received) >= total:
                            break
                    try:
                        message = simple.get(timeout=0.2)
                    except simple.Empty:
                        continue
                    message.ack()
                    with lock:
                        received.append((message.payload["n"], len(message.payload["pad"])))
                simple.close()
        except Exception as exc:  # noqa: BLE001 - reported by the test below
            errors.append(repr(exc))

    with connection(tmp_path) as conn:  # each process declares its queues once at start (kombu keeps bindings
        box(conn.default_channel).declare()  # per process: threads racing on the first declare drop messages)
    threads = [threading.Thread(target=produce, args=(i,), daemon=True) for i in range(producers)]
    threads += [threading.Thread(target=consume, daemon=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()) + 1)
    assert errors == []
    assert sorted(n for n, _ in received) == list(range(total))
    assert {size for _, size in received} == {2000}  # whole, never a half-written file
