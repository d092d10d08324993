from ctxwrap.entry import main

main()
