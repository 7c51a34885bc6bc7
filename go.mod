module github.com/sluice-rl/sluice

go 1.26.8

require go.yaml.in/yaml/v3 v3.0.6

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/pgx/v5 v5.12.0 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/redis/rueidis v1.0.79 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)
