from ctxwrap.cli import main

main()
