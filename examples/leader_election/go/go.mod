module lockd/examples/leader_election/go

go 1.19

require lockd/clients/go v0.0.0

replace lockd/clients/go => ../../../clients/go
