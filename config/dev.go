package config

// DevAPIKey is the bearer key of the built-in development config.
const DevAPIKey = "dev-key"

// DevTenant is the tenant DevAPIKey maps to.
const DevTenant = "dev"

// DevRecipientTokenSecret signs the development tenant's recipient tokens
// in the built-in development config. Never use it anywhere else.
const DevRecipientTokenSecret = "dev-recipient-token-secret-do-not-use-in-production"

// Dev is the configuration herald runs on without a config file: SQLite, the
// db transport, a simulated provider on every channel, one development API
// key and a few example kinds, so the README's curl works on a fresh machine.
func Dev() *Config {
	c := &Config{
		Dev:     true,
		APIKeys: []APIKey{{Key: DevAPIKey, Tenant: DevTenant}},
		RecipientTokens: RecipientTokens{Keys: map[string][]RecipientKey{
			DevTenant: {{ID: "dev-1", Secret: DevRecipientTokenSecret}},
		}},
	}
	for _, ch := range []string{"push", "sms", "alimtalk", "email", "webhook"} {
		c.Providers = append(c.Providers, Provider{Name: "sim-" + ch, Type: "sim", Channel: ch})
	}
	c.Kinds = []Kind{
		{
			Name: "payment.approved", Category: "transactional", Channels: []string{"webhook", "push"},
			Templates: map[string]Template{
				"webhook": {Title: "Payment approved", Body: "Paid {{.amount}} won at {{.merchant}}"},
				"push":    {Title: "Payment approved", Body: "Paid {{.amount}} won at {{.merchant}}"},
			},
		},
		{
			Name: "appointment.reminder", Category: "transactional", Channels: []string{"sms"},
			Templates: map[string]Template{
				"sms": {Title: "Reminder", Body: "Your appointment is on {{.date}} at {{.time}}."},
			},
		},
		{
			Name: "coupon.expiring", Category: "marketing", Channels: []string{"push", "email"},
			Templates: map[string]Template{
				"push":  {Title: "Your coupon expires soon", Body: "{{.coupon}} expires on {{.date}}."},
				"email": {Title: "Your coupon expires soon", Body: "{{.coupon}} expires on {{.date}}."},
			},
		},
		{
			// The inbox keeps the item; push tells the app to look. Both
			// speak the recipient's profile language.
			Name: "order.shipped", Category: "transactional", Channels: []string{"inbox", "push"},
			Templates: map[string]Template{
				"inbox": {Locales: map[string]Template{
					"ko":      {Title: "상품이 발송되었습니다", Body: "{{.item}} 상품이 출발했습니다. 운송장 번호 {{.tracking}}"},
					"default": {Title: "Your order has shipped", Body: "{{.item}} is on its way. Tracking number {{.tracking}}."},
				}},
				"push": {Locales: map[string]Template{
					"ko":      {Title: "상품이 발송되었습니다", Body: "{{.item}} 상품이 출발했습니다."},
					"default": {Title: "Your order has shipped", Body: "{{.item}} is on its way."},
				}},
			},
		},
		{
			Name: "fraud.alert", Category: "alert", Channels: []string{"sms", "push"},
			Templates: map[string]Template{
				"sms":  {Title: "Security alert", Body: "A payment of {{.amount}} won was blocked."},
				"push": {Title: "Security alert", Body: "A payment of {{.amount}} won was blocked."},
			},
		},
	}
	return c
}
