from contract.ids import random_hex


def test_ids_have_the_asked_length_and_do_not_repeat() -> None:
    ids = [random_hex(24) for _ in range(5000)]  # crosses several 4 KiB blocks
    assert all(len(value) == 48 and int(value, 16) >= 0 for value in ids)
    assert len(set(ids)) == len(ids)


def test_a_request_larger_than_a_block_is_served() -> None:
    assert len(random_hex(5000)) == 10000


def test_a_forked_child_draws_fresh_bytes() -> None:
    import os

    random_hex(8)  # the parent's pool is filled
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.write(write, random_hex(8).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 16).decode()
    assert child != random_hex(8)
