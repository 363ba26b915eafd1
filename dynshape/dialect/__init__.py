"""The memory dialect as the compiler uses it: typed views and constructors of its ops
(``memory.py``) and their type rules (``memory_types.py``). The ops themselves are declared in
the IR's catalogue (``ir/ops/memory.py``)."""
