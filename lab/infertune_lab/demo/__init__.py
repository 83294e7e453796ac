"""`infertune demo`: the whole product on one machine. kmock's Kubernetes emulator, a fleet agent
that plays the kubelet with simulated vLLM replicas, Debian's Prometheus, and the real operator."""
