"""Human and online evaluation (the loop's second and third evaluation legs) and the production flywheel:
Label Studio round trip (`labelstudio`, `human`), inter-annotator agreement (`agreement`), the canary
server and its logs (`canary`), and the sequential analysis that ends a canary (`sequential`, `canary_analysis`).
"""
