from skillopt.cli.main import main

main()
