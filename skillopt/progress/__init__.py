"""What a run shows while it runs: engine events as Rich bars (`bars`) or plain log lines (`plain`),
on one stderr console (`console`). The CLI and the Python API's `progress=` both choose a view
with `plain.progress_view`."""
