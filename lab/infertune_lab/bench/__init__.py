"""The closed-loop benchmark: the same traffic through the same simulated fleet, once per policy
(infertune's decision core, and the autoscalers it is compared with), in virtual time."""
