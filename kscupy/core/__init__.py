"""The foundations every layer shares: patterns (:mod:`.pattern`), permutations
(:mod:`.shuffle`), declared structure (:mod:`.structure`), what crosses from the operators
to the layers below (:mod:`.factor`: Factor, FactorChain; :mod:`.problem`), the device's
facts (:mod:`.device`), the array-generic algorithms (:mod:`.reference`), array modules and
dtypes (:mod:`.arrays`) and memory checks (:mod:`.memory`)."""
