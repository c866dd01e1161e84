"""The graph core: grad modes (:mod:`.modes`), version counters (:mod:`.versions`),
hooks (:mod:`.hooks`) and THE backward engine (:mod:`.engine`).

It sits above the op records and below the Tensor: it knows tensors only by their
attributes and imports nothing of the layers above; what it needs from them they
hand it when imported (:mod:`.above`).
"""
