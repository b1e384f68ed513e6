"""The local test bed: real Kafka, Spark, S3 (moto) and HDFS processes on 127.0.0.1.

Used by the test suite (tests/conftest.py) and the README's demo (scripts/demo.py). Every
component starts on ephemeral ports, logs to a file, is ready-checked for real and is stopped by
the pid it was started with. A component that cannot start raises TestbedError with its log tail.
"""
