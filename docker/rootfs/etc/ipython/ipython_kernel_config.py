# Read by every IPython kernel in the container (IPython's system config folder), whichever environment
# or kernel spec runs it: the stop's kernel rule (/usr/local/lib/container/python-hooks/kernel_stop.py, README.md
# "Stopping"). Run in a namespace of its own, so a notebook's variables never see its names.
_KERNEL_STOP = "/usr/local/lib/container/python-hooks/kernel_stop.py"
c.InteractiveShellApp.exec_lines.append(  # noqa: F821 (c is the config IPython passes in)
    f"exec(compile(open({_KERNEL_STOP!r}).read(), {_KERNEL_STOP!r}, 'exec'), {{'__name__': 'kernel_stop'}})")
