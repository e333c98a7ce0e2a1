"""Checks for the people who extend privpix: the mechanism conformance suite (:mod:`.conformance`, the analogue
of scikit-learn's ``check_estimator``) and the exact distribution tests of the noise samplers
(:mod:`.stattests`), which the test suite and ``benchmarks/noise_false_alarms.py`` share."""
