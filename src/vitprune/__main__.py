from vitprune.cli import main

main()
