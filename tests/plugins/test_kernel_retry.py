"""The nbval run's kernel-start retry (tests/plugins/kernel_retry.py)."""


import kernel_retry  # beside this file: pytest puts its folder on sys.path
import pytest


def flaky(failures: int, message: str = kernel_retry.DIED):
    calls = []

    def start(*args, **kwargs):
        calls.append((args, kwargs))
        if len(calls) <= failures:
            raise RuntimeError(message)
        return "kernel"

    return start, calls


def test_a_kernel_that_dies_on_start_is_started_again():
    start, calls = flaky(2)
    assert kernel_retry.retrying(start)(kernel_name="python3") == "kernel"
    assert calls == [((), {"kernel_name": "python3"})] * 3


def test_a_kernel_that_never_answers_on_start_is_started_again():
    start, calls = flaky(1, "Kernel didn't respond in 60 seconds")
    assert kernel_retry.retrying(start)() == "kernel"
    assert len(calls) == 2
    start, calls = flaky(3, "Kernel didn't respond in 60 seconds")
    with pytest.raises(RuntimeError, match="didn't respond"):
        kernel_retry.retrying(start)()
    assert len(calls) == 3


def test_it_gives_up_after_three_deaths_and_never_retries_other_errors():
    start, calls = flaky(3)
    with pytest.raises(RuntimeError, match="Kernel died"):
        kernel_retry.retrying(start)()
    assert len(calls) == 3
    start, calls = flaky(1, "No such kernel named python9")
    with pytest.raises(RuntimeError, match="No such kernel"):
        kernel_retry.retrying(start)()
    assert len(calls) == 1


def test_the_plugin_replaces_nbvals_kernel_start():
    import nbval.kernel

    assert nbval.kernel.start_new_kernel.__qualname__ == "retrying.<locals>.start_new_kernel"
