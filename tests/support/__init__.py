"""What the tests share: the allocator seam's fake, saved runs and report corpora, fuzz inputs, file loading.

``tests/`` is on ``sys.path`` when pytest runs (its rootdir conftest), so tests import these as
``from support.fakes import FakeHostAllocator``. Shared fixtures live in ``tests/conftest.py``.
"""
