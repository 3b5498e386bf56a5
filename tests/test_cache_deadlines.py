"""kiln.cache.deadlines: calls run on their caller's thread, ended at their deadline by one watcher."""
import threading
import time

from kiln.cache import deadlines


def test_a_call_that_ends_in_time_is_not_expired():
    fired = threading.Event()
    token = deadlines.start(30.0, fired.set)
    assert deadlines.stop(token) is True
    assert not fired.is_set()


def test_a_call_past_its_deadline_is_expired_and_says_so():
    fired = threading.Event()
    token = deadlines.start(0.05, fired.set)
    assert fired.wait(30), "the watcher did not run the expiry"
    assert deadlines.stop(token) is False


def test_a_shorter_deadline_registered_later_is_not_held_up_by_a_longer_one():
    slow, quick = threading.Event(), threading.Event()
    long_token = deadlines.start(3600.0, slow.set)
    time.sleep(0.2)  # the watcher is asleep until the long deadline
    short_token = deadlines.start(0.05, quick.set)
    assert quick.wait(30), "the watcher slept through the earlier deadline"
    assert deadlines.stop(short_token) is False and deadlines.stop(long_token) is True
    assert not slow.is_set()


def test_an_expiry_that_raises_leaves_the_watcher_running():
    def broken():
        raise RuntimeError("shutting the connection failed")
    first = deadlines.start(0.01, broken)
    fired = threading.Event()
    second = deadlines.start(0.05, fired.set)
    assert fired.wait(30)
    assert deadlines.stop(first) is False and deadlines.stop(second) is False
