"""The Kafka protocol on the rings, shared by clients and brokers.

- frames: the supported APIs and versions, request/response headers, encode and decode of
  whole frames (kio codecs, with hand encoders where the records ride);
- frame_descriptor: the binary layouts of the frame headers and record-carrying bodies;
- batch_bodies: ProduceRequest, FetchRequest and FetchResponse bodies written in place;
- produce_response / produce_response_descriptor: the broker's Produce answer, packed field
  by field;
- fetch_response: the broker's Fetch answer written in place, log bytes copied from the files.

Pure codecs: bytes in, bytes or values out; no I/O, no state shared between threads.
"""
