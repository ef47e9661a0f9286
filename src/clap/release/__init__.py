"""Release control, through git: the gate's decision (`gate`), the bundle that pins the evidence (`bundle`),
the serving check every adapter load passes (`serving`), the registry's GTO tags (`registry`: release,
rollback), prod restored from the DVC cache (`prod`), and the rounds of the loop and their timeline."""
