"""The memory dialect as the compiler uses it (``memory.py``): one class per op with a typed
constructor, typed fields and its type rule. The ops themselves are declared once
(``shape_funcs/declarations/catalogue/memory.py``)."""
